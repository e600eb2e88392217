#!/usr/bin/env bash
# Packs built binaries, without their debug information, with the shared libraries they load (the
# Debian packages' fmt, spdlog, OpenBLAS, PCRE2, ... and the CUDA runtime) into one archive, for a
# GPU machine that has a driver but not this machine's packages and cannot install them. The C
# library, the dynamic loader and the driver's own libraries stay out: those must be the target
# machine's. So does NCCL (200 MB): unpacking looks for the one Python's nvidia-nccl package
# installs.
#   bash tools/gpu_bundle.sh pack ARCHIVE BINARY[=NAME] ...   NAME: the binary's name in the
#                                                            archive (default its file name), so
#                                                            two builds of one program can travel
#   source tools/gpu_bundle.sh unpack ARCHIVE [DIR]           on the GPU machine: unpacks into DIR
#                                                            (default a new temporary folder), puts
#                                                            DIR/bin on PATH and DIR/lib on
#                                                            LD_LIBRARY_PATH
# A typical old-against-new timing: build and pack both binaries here, then on the GPU machine
#   source tools/gpu_bundle.sh unpack b.tgz && bash tools/bench_compare.sh pagoda_old pagoda

# Libraries the target machine provides itself.
gpu_bundle_system_lib() {
  case "$(basename "$1")" in
    linux-vdso* | ld-linux* | libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | \
      libcuda.so* | libnvidia* | libnccl.so*) return 0 ;;
  esac
  return 1
}

gpu_bundle_pack() {
  local archive=$1
  shift
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib"
  local spec binary name lib
  for spec in "$@"; do
    binary=${spec%%=*}
    name=$(basename "$binary")
    [ "$spec" != "$binary" ] && name=${spec#*=}
    [ -x "$binary" ] || { echo "not an executable: $binary" >&2; rm -rf "$stage"; return 2; }
    strip --strip-debug -o "$stage/bin/$name" "$binary" || { rm -rf "$stage"; return 1; }
    while read -r lib; do
      gpu_bundle_system_lib "$lib" || [ -e "$stage/lib/$(basename "$lib")" ] ||
        cp -L "$lib" "$stage/lib/" || {
        echo "cannot copy $lib" >&2
        rm -rf "$stage"
        return 1
      }
    done < <(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')
  done
  local count
  count=$(ls "$stage/bin" | wc -l)
  tar czf "$archive" -C "$stage" bin lib
  rm -rf "$stage"
  echo "$archive: $count binaries, $(du -h "$archive" | cut -f1)"
}

gpu_bundle_unpack() {
  local archive=$1
  local dir=${2:-}
  [ -n "$dir" ] || dir=$(mktemp -d) || return 1
  mkdir -p "$dir"
  tar xzf "$archive" -C "$dir" || return 1
  local nccl
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' \
    2>/dev/null)
  export PATH="$dir/bin:$PATH"
  export LD_LIBRARY_PATH="$dir/lib${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

case "${1:-}" in
  pack) shift; gpu_bundle_pack "$@" ;;
  unpack) shift; gpu_bundle_unpack "$@" ;;
  *) echo "usage: gpu_bundle.sh pack ARCHIVE BINARY[=NAME]... | unpack ARCHIVE [DIR]" >&2
     return 2 2>/dev/null || exit 2 ;;
esac
