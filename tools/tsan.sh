#!/usr/bin/env bash
# ThreadSanitizer over the code that runs on several threads: the engine service, the HTTP server,
# the OpenAI server, the engine and scheduler, the library facade (Llm, its streams), the CPU thread
# pool, the in-process CPU ranks and tensor and decode-context parallelism over them, the
# end-to-end server test, and the GPU sampler's device code under its host emulation (each of a
# block's thousand threads a fiber that ThreadSanitizer tracks as a thread of its own, synchronized
# only by the barriers: its shared-memory races would show here).
# Builds into build/tsan (CUDA off) and runs those tests; exits non-zero on any report.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/install_deps.sh
pagoda_install_deps
mkdir -p build
bash tools/peers/setup.sh
pagoda_build build/tsan -DPAGODA_BUILD_TESTS=ON -DPAGODA_TSAN=ON -DPAGODA_SANITIZE=OFF \
  -DPAGODA_CUDA=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
# OpenBLAS's own threads are not instrumented: its synchronisation would look like races.
OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir build/tsan --output-on-failure --no-tests=error -j "$(nproc)" \
  -R "EngineService|HttpServer|OpenAiServer|OpenAiClient|EngineTest|SchedulerTest|ThreadPool|Serve|CpuCommunicator|ParallelTest|ContextParallel|LlmTest|SamplingEmulation"
