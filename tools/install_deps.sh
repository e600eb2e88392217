#!/usr/bin/env bash
# Installs the Debian packages pagoda builds and tests with. Sourced by the README's commands.
set -euo pipefail

pagoda_packages=(
  cmake g++ make pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libopenblas-dev libxxhash-dev
  libpcre2-dev libutf8proc-dev libboost-dev
  libgtest-dev libgmock-dev googletest
  pybind11-dev python3-dev python3-pytest python3-venv python3-setuptools python3-wheel
)

pagoda_install_deps() {
  local missing=()
  for package in "${pagoda_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# Configures and builds into $1 with extra CMake arguments: every target, or those named in
# PAGODA_TARGETS (space-separated).
pagoda_build() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  local targets=()
  [ -n "${PAGODA_TARGETS:-}" ] && read -ra targets <<<"$PAGODA_TARGETS"
  cmake --build "$dir" -j "$(nproc)" ${targets[@]+--target "${targets[@]}"}
}
