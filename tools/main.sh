#!/usr/bin/env bash
# The main job: install dependencies, build, and run pagoda on an example shipped in the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/install_deps.sh
pagoda_install_deps
mkdir -p build
pagoda_build build/release -DPAGODA_BUILD_TESTS=OFF
build/release/src/pagoda inspect \
  --model examples/configs/gemma-4-e4b \
  --draft-model examples/configs/gemma-4-e4b-assistant \
  --kv-cache-memory 4GiB "$@"
