#!/usr/bin/env bash
# The CUDA path on a GPU machine, in one call: checks first, then timings, then a summary.
#   1. kernel tables: every CUDA op against the CPU reference, and the CUDA attention backend
#      against dense attention (fresh random inputs per case, poisoned outputs, NHD/HND/padded
#      pages, every head size it declares);
#   2. model parity: each fixture (Llama, Qwen3, Gemma 4 with and without KV sharing, MiMo-V2-Flash,
#      the default model) on the GPU against the CPU path and transformers' reference, with and
#      without CUDA graphs (tolerances in tests/model/cuda_parity_test.cc);
#      and TP / DCP ranks sharing the GPU against one rank (tests/engine/cuda_parallel_test.cc);
#      and `pagoda serve` against `pagoda generate` with FP8 weights and e4m3 KV pages;
#   3. the attention micro-benchmark (decode, verify rows, prefill) beside PyTorch's SDPA, and
#      beside FlashInfer's kernels when PAGODA_FLASHINFER_DIR names its tree; the decode GEMM
#      shapes; sampling on the device per step shape (beside FlashInfer's samplers too); and
#      `pagoda bench` of Llama-3-8B- and Gemma-4-E4B-shaped models against their weight-streaming
#      floors, greedy and (Llama) with sampling on the device, at batch 2 and 4, an 8k-token
#      prefill in bf16 and FP8, with FP8 projections (batch 1, 4, 8 and 16), and with e4m3 KV pages
#      against bf16 ones at batch 64 and 2k-token prompts.
# Usage: bash tools/gpu_check.sh [BUILD_DIR]   (default build/release; built first when missing)
# Logs go to $GPU_CHECK_OUT (default build/gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
out=${GPU_CHECK_OUT:-build/gpu-check}
source tools/gpu_steps.sh
step kernels "$build/tests/pagoda_tests" \
  --gtest_filter='CudaOpsTest.*:Backends/AttentionTest.*/cuda_*:AttentionTest.*:CudaSamplingTest.*'
step parity "$build/tests/pagoda_tests" --gtest_filter='Fixtures/CudaParityTest.*:Fixtures/CudaFp8KvParityTest.*'
step ranks "$build/tests/pagoda_tests" \
  --gtest_filter='Fixtures/CudaParallelTest.*:ContextMergeTest.*:Nccl*'
# `pagoda serve` against `pagoda generate` on the GPU, FP8 weights and KV pages.
step serve_fp8 python3 tests/server/serve_matches_generate.py --pagoda "$build/src/pagoda" \
  --source . --device cuda
step attention_bench "$build/src/attention_bench"
# FlashInfer's decode and prefill kernels beside pagoda's, in one process, on the same pages:
# where PAGODA_FLASHINFER_DIR names a FlashInfer source tree, a second build of the benchmarks
# (its samplers beside cuda::sample too).
if [ -n "${PAGODA_FLASHINFER_DIR:-}" ]; then
  step flashinfer_build bash -c 'cmake -S . -B build/flashinfer -DCMAKE_BUILD_TYPE=Release \
    -DPAGODA_FLASHINFER_DIR="$0" >build/flashinfer.configure.log &&
    cmake --build build/flashinfer -j "$(nproc)" --target attention_bench sampling_bench' \
    "$PAGODA_FLASHINFER_DIR"
  step_tail=60 step attention_flashinfer build/flashinfer/src/attention_bench
  step_tail=45 step sampling_flashinfer build/flashinfer/src/sampling_bench
fi
if python3 -c 'import torch' 2>/dev/null; then
  step attention_sdpa python3 tools/attention_sdpa.py
fi
step linear_bench "$build/src/linear_bench"
# The FlashInfer build's sampling table above already holds pagoda's column.
if [ -z "${PAGODA_FLASHINFER_DIR:-}" ]; then
  step_tail=45 step sampling_bench "$build/src/sampling_bench"
fi
for model in llama-3-8b gemma-4-e4b; do
  for mode in graphs eager; do
    flags=()
    [ "$mode" = eager ] && flags=(--enforce-eager)
    step "bench_${model}_$mode" "$build/src/pagoda" bench --model "bench/configs/$model" \
      --load-format dummy --device cuda --max-model-len 4096 --batch-size 1 --input-len 512 \
      --output-len 128 --num-iters 3 "${flags[@]}"
  done
done
for batch in 1 64; do
  step "bench_llama-3-8b_batch${batch}_sampled" "$build/src/pagoda" bench \
    --model bench/configs/llama-3-8b --load-format dummy --device cuda --max-model-len 4096 \
    --batch-size $batch --input-len 512 --output-len 128 --num-iters 2 --temperature 0.8 \
    --top-p 0.95
done
# bf16 at batch 2 and 4 (the tensor-core GEMV against cuBLASLt's GEMM), and an 8k-token prefill.
for batch in 2 4; do
  step "bench_llama-3-8b_batch$batch" "$build/src/pagoda" bench --model bench/configs/llama-3-8b \
    --load-format dummy --device cuda --max-model-len 4096 --batch-size $batch --input-len 512 \
    --output-len 128 --num-iters 2
done
for quantization in auto fp8; do
  step "bench_llama-3-8b_prefill_8k_$quantization" "$build/src/pagoda" bench \
    --model bench/configs/llama-3-8b --load-format dummy --device cuda --max-model-len 8448 \
    --batch-size 1 --input-len 8192 --output-len 2 --num-iters 2 --quantization $quantization
done
# FP8 at batch 1 (the one-row GEMV), 4 and 8 (the tensor-core GEMV) and 16 (the FP8 GEMM).
for batch in 1 4 8 16; do
  step "bench_llama-3-8b_batch${batch}_fp8" "$build/src/pagoda" bench \
    --model bench/configs/llama-3-8b --load-format dummy --device cuda --max-model-len 4096 \
    --batch-size $batch --input-len 512 --output-len 128 --num-iters 2 --quantization fp8
done
for kv in auto fp8; do
  step "bench_llama-3-8b_batch64_2k_kv_$kv" "$build/src/pagoda" bench \
    --model bench/configs/llama-3-8b --load-format dummy --device cuda --max-model-len 4096 \
    --batch-size 64 --input-len 2048 --output-len 128 --num-iters 2 --kv-cache-dtype $kv
done
step bench_llama-3-8b_batch64 "$build/src/pagoda" bench --model bench/configs/llama-3-8b \
  --load-format dummy --device cuda --max-model-len 4096 --batch-size 64 --input-len 512 \
  --output-len 128 --num-iters 2
step_summary
grep -h "\[ cuda " "$out/parity.log" || true
grep -h "floor" "$out"/bench_*.log || true
exit $status
