#!/usr/bin/env bash
# Tensor and decode-context parallelism on a machine with two (or more) GPUs, in one call: checks
# first, then timings, then a summary.
#   topology:  how the GPUs are linked (nvidia-smi) and the transport NCCL picks (its own log);
#   ranks:     every fixture at TP 2, DCP 2 and TP 2 x DCP 2 with a rank per GPU over NCCL, with
#              CUDA graphs and eagerly, against one GPU (tests/engine/cuda_parallel_test.cc), and
#              NCCL's collectives against host sums;
#   comm:      all-reduce time and bus bandwidth for 8 KB to 256 MB (bench/comm_bench.cc);
#   llama:     the Llama-3-8B shape (dummy weights) at TP 1 and TP 2: the batch-1 decode step
#              against one rank's weight-streaming floor, and batch-64 throughput;
#   dcp:       the Gemma-4-E4B shape at batch 8 x 32k-token prompts, DCP 1 and 2: the decode step,
#              and KV tokens per GiB of one rank (pagoda inspect).
# Usage: bash tools/gpu_parallel_check.sh [checks|comm|bench|all] [BUILD_DIR]   (default all,
# build/release, built first when missing; checks = topology and ranks, bench = llama and dcp).
# Logs go to $GPU_CHECK_OUT (default build/gpu-parallel-check).
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0 (pagoda also sets it before any communicator).
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:-all}
build=${2:-build/release}
out=${GPU_CHECK_OUT:-build/gpu-parallel-check}
pagoda=$build/src/pagoda
export NCCL_NVLS_ENABLE=0
step_tail=40
source tools/gpu_steps.sh

gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "GPUs: $gpus"
if [ "$gpus" -lt 2 ]; then
  echo "this check needs two GPUs; the NCCL cases skip and the TP/DCP timings cannot run"
fi

if [ "$part" = checks ] || [ "$part" = all ]; then
  step topology bash -c 'nvidia-smi topo -m; nvidia-smi nvlink -s 2>&1 | head -40'
  step ranks env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH "$build/tests/pagoda_tests" \
    --gtest_filter='Fixtures/CudaNcclParallelTest.*:Nccl*'
  grep -h "\[ cuda " "$out/ranks.log" || true
  echo "NCCL's choice of transport and rings:"
  grep -hE "Pattern|via P2P|via SHM|NVLS|comm .* rank .* nranks" "$out/ranks.log" | sort |
    uniq -c | sort -rn | head -12 || true
fi
if [ "$part" = comm ] || [ "$part" = all ]; then
  step comm "$build/src/comm_bench" $((gpus < 2 ? gpus : 2))
fi

run_bench() {
  local name=$1
  shift
  step "$name" "$pagoda" bench --load-format dummy --device cuda --num-iters 3 "$@"
}
if [ "$part" = bench ] || [ "$part" = all ]; then
  for tp in 1 2; do
    run_bench "llama_batch1_tp$tp" --model bench/configs/llama-3-8b --max-model-len 4096 \
      --batch-size 1 --input-len 512 --output-len 128 --tensor-parallel-size $tp
    run_bench "llama_batch64_tp$tp" --model bench/configs/llama-3-8b --max-model-len 4096 \
      --batch-size 64 --input-len 512 --output-len 128 --tensor-parallel-size $tp
  done
  for dcp in 1 2; do
    step_tail=3 step "dcp_inspect_dcp$dcp" "$pagoda" inspect --model bench/configs/gemma-4-e4b \
      --max-model-len 32832 --decode-context-parallel-size $dcp
    run_bench "dcp_gemma_batch8_32k_dcp$dcp" --model bench/configs/gemma-4-e4b \
      --max-model-len 32832 --batch-size 8 --input-len 32768 --output-len 64 \
      --decode-context-parallel-size $dcp
  done
fi

step_summary
echo
echo "| run | decode step mean / median / p99 | decode throughput | floor |"
echo "|---|---|---|---|"
for log in "$out"/llama_*.log "$out"/dcp_gemma_*.log; do
  [ -f "$log" ] || continue
  step_line=$(grep -h "decode step mean" "$log" | cut -d'|' -f3)
  throughput=$(grep -h "decode throughput" "$log" | cut -d'|' -f3)
  floor=$(grep -h "weight-streaming floor" "$log" | cut -d'|' -f3)
  echo "| $(basename "$log" .log) |$step_line|$throughput|$floor|"
done
grep -H "per GiB" "$out"/dcp_inspect_*.log || true
exit $status
