#!/usr/bin/env bash
# The server against the engine on a GPU: `pagoda bench` (offline, one batch) and `pagoda serve`
# loaded by tools/bench_serve.mjs with the same requests (Llama-3-8B shape, dummy bf16 weights,
# 512 prompt tokens as ids, 128 generated, greedy, ignore_eos) at 64 and 256 clients. Prints both
# tables; docs/performance.md keeps the figures.
#   tools/gpu_serve_bench.sh BUILD_DIR TOKENIZER_DIR   (a tokenizer with Llama 3's 128k vocabulary)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
tokenizer=${2:?give a directory holding a Llama 3 tokenizer.json}
pagoda="$build/src/pagoda"
model=bench/configs/llama-3-8b
common=(--model "$model" --load-format dummy --device cuda --max-model-len 4096)
for batch in 64 256; do
  echo "== pagoda bench, batch $batch"
  "$pagoda" bench "${common[@]}" --batch-size $batch --input-len 512 --output-len 128 \
    --num-iters 2 --max-num-seqs 256
done
port=18123
"$pagoda" serve "${common[@]}" --tokenizer "$tokenizer" --port $port --max-num-seqs 256 \
  --log-level warn &
server=$!
for i in $(seq 600); do
  python3 -c "import urllib.request as u; u.urlopen(\"http://127.0.0.1:$port/health\")" 2>/dev/null && break
  sleep 0.5
done
for clients in 64 256; do
  echo "== bench_serve, $clients clients"
  node tools/bench_serve.mjs --base-url "http://127.0.0.1:$port/v1" --num-prompts $((clients * 3)) \
    --concurrency $clients --input-len 512 --output-len 128 --token-ids 32000 --seed 0
done
kill -TERM $server
wait $server
echo "server exit: $?"
