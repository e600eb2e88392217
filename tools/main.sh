#!/usr/bin/env bash
# The main job: install dependencies, build, and generate text with the model that ships in the
# repository (models/kjv-gemma4), offline. Extra arguments go to `pagoda generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/install_deps.sh
pagoda_install_deps
mkdir -p build
pagoda_build build/release -DPAGODA_BUILD_TESTS=OFF -DPAGODA_SANITIZE=OFF -DPAGODA_CUDA=ON
build/release/src/pagoda generate "And God said" --max-tokens 64 "$@"
