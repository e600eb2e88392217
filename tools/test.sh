#!/usr/bin/env bash
# The full test suite: install dependencies (Debian packages; the JavaScript peers with npm), then
# build and run every test twice — a normal build and one under AddressSanitizer +
# UndefinedBehaviorSanitizer — and run each libFuzzer target briefly from its seed corpus. CUDA
# sources compile whenever nvcc is present (CUDA tests skip themselves without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/install_deps.sh
pagoda_packages+=(clang libclang-rt-14-dev)  # the sanitizer build and the fuzzers
pagoda_install_deps
mkdir -p build
echo "== JavaScript peers (tokenizers, chat templates)"
bash tools/peers/setup.sh

# Every option the suite relies on is set here, since CMake keeps a build directory's earlier choices
# (tools/main.sh configures build/release without tests), and ctest fails when it finds no tests.
echo "== normal build"
# The Python module is built and tested here (with Debian's python3, which has the pytest installed
# above), not under the sanitizers, whose runtime a plain python3 would have to preload.
pagoda_build build/release -DPAGODA_BUILD_TESTS=ON -DPAGODA_SANITIZE=OFF -DPAGODA_CUDA=ON \
  -DPAGODA_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3
ctest --test-dir build/release --output-on-failure --no-tests=error -j "$(nproc)"

echo "== pip install into a virtual environment, and the Python tests against what it installed"
# Offline, with Debian's setuptools; setup.py builds the module in build/release, configured above.
rm -rf build/venv
/usr/bin/python3 -m venv --system-site-packages build/venv
PAGODA_BUILD_DIR="$PWD/build/release" build/venv/bin/pip install --quiet --no-build-isolation \
  --no-index .
(cd build/venv && bin/python -c 'import pagoda, sys; assert pagoda.__file__.startswith(sys.prefix)' &&
  PAGODA_BIN="$OLDPWD/build/release/src/pagoda" PAGODA_SOURCE_DIR="$OLDPWD" \
    bin/python -m pytest -q -p no:cacheprovider "$OLDPWD/python/tests")

echo "== the installed package, and the C++ example built against it"
rm -rf build/install build/example
cmake --install build/release --prefix build/install >/dev/null
cmake -S examples/cpp -B build/example -DCMAKE_PREFIX_PATH="$PWD/build/install" \
  >build/example.configure.log 2>&1 || { cat build/example.configure.log; exit 1; }
cmake --build build/example -j "$(nproc)"
build/example/generate_example

echo "== ASan + UBSan build"
# clang, -O1 with line tables only, and only what the tests run: a faster build (clang compiles the
# sanitized sources in about 60% of GCC's time) whose reports still name files and lines. The
# normal build compiles the CUDA sources; this one leaves them out, so the build without CUDA is
# tested too. The host emulation of CUDA threads (fibers switched by swapcontext, which
# AddressSanitizer does not fully follow) and the GPU sampler's test on it run in the normal build
# only.
CC=clang CXX=clang++ PAGODA_TARGETS="pagoda pagoda_tests" pagoda_build build/asan \
  -DPAGODA_BUILD_TESTS=ON -DPAGODA_SANITIZE=ON -DPAGODA_CUDA=OFF -DPAGODA_PYTHON=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure --no-tests=error -j "$(nproc)" \
  -E '^(Cuda|Sampling)Emulation'

echo "== fuzzers (clang, ASan + UBSan), 20 s each"
bash tools/fuzz.sh --seconds 20
