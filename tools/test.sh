#!/usr/bin/env bash
# The full test suite: install dependencies (Debian packages; the JavaScript peers with npm), then
# build and run every test twice — a normal build and one under AddressSanitizer +
# UndefinedBehaviorSanitizer. CUDA sources compile whenever nvcc is present (CUDA tests skip
# themselves without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/install_deps.sh
pagoda_install_deps
mkdir -p build
echo "== JavaScript peers (tokenizers, chat templates)"
bash tools/peers/setup.sh

echo "== normal build"
pagoda_build build/release
ctest --test-dir build/release --output-on-failure -j "$(nproc)"

echo "== ASan + UBSan build"
# -O1 with line tables only: a faster build whose reports still name files and lines. The normal
# build compiles the CUDA sources; this one leaves them out, so the build without CUDA is tested too.
pagoda_build build/asan -DPAGODA_SANITIZE=ON -DPAGODA_CUDA=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$(nproc)"
