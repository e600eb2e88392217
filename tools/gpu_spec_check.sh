#!/usr/bin/env bash
# Speculative decoding on a GPU machine, in one call: checks, then timings, then a summary.
#   checks: the centroid head and the verify cases of the attention table against the CPU; every
#           drafter pair's greedy output against the run without drafts, with CUDA graphs and
#           eagerly, drafts judged on the device and on the host (tests/engine/cuda_speculative_test.cc).
#   kjv:    the default model with its assistant, batch 1 and 16, with and without drafts:
#           acceptance on its own text (generate --stats) and decode throughput (bench).
#   bench:  the attention kernel at 1 to 8 query rows per sequence (attention_bench verify);
#           Llama-3-8B shape (dummy weights) verifying K = 1..4 drafts of a Llama-3.2-1B-shaped
#           draft model against a plain decode step, batch 1 and 16; the Gemma-4-E4B-shaped
#           assistant's drafting time on the E4B shape, K = 3.
#   profile: (not in all) the kernels of Llama-3-8B-shaped batch-1 verify steps of K = 3 and 4
#           drafts, each kernel's time under ncu (graph nodes one by one), side by side
#           (tools/ncu_kernels.py): where the K = 4 step's extra time goes.
# Usage: bash tools/gpu_spec_check.sh [checks|kjv|bench|profile|all] [BUILD_DIR]   (default all,
# build/release, built first when missing). Logs and JSON reports go to $GPU_CHECK_OUT (default
# build/gpu-spec-check).
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:-all}
build=${2:-build/release}
out=${GPU_CHECK_OUT:-build/gpu-spec-check}
pagoda=$build/src/pagoda
step_tail=12
source tools/gpu_steps.sh

if [ "$part" = checks ] || [ "$part" = all ]; then
  step spec_kernels "$build/tests/pagoda_tests" \
    --gtest_filter='CudaOpsTest.CentroidMaskedLogitsMatchCpu:Backends/AttentionTest.*/cuda_*'
  step spec_identity "$build/tests/pagoda_tests" --gtest_filter='Pairs/CudaSpeculativeTest.*'
  grep -h "\[ cuda spec \]" "$out/spec_identity.log" || true
fi

if [ "$part" = kjv ] || [ "$part" = all ]; then
  openings=("In the beginning" "And God said" "The LORD is my shepherd" "Blessed are the"
    "And it came to pass" "Now the serpent" "In my Father's house" "For God so loved"
    "And Moses said unto" "Then Jesus answered" "The heavens declare" "And the earth was"
    "Hear, O Israel" "Let not your heart" "And Jacob went out" "Praise ye the LORD")
  for batch in 1 16; do
    prompts=("${openings[@]:0:$batch}")
    for mode in plain spec; do
      flags=()
      [ "$mode" = spec ] && flags=(--speculative-config '{"num_speculative_tokens": 3}')
      step "kjv_batch${batch}_$mode" "$pagoda" generate --device cuda --max-tokens 256 \
        --ignore-eos --stats "${flags[@]}" "${prompts[@]}"
      step "kjv_bench_batch${batch}_$mode" "$pagoda" bench --device cuda --input-len 16 \
        --output-len 256 --num-iters 3 --batch-size $batch "${flags[@]}"
    done
  done
fi

if [ "$part" = bench ] || [ "$part" = all ]; then
  # The attention kernel alone at 1 to 8 query rows per sequence (where the row tiles change).
  step_tail=40 step attention_verify "$build/src/attention_bench" verify
  common=(--load-format dummy --device cuda --max-model-len 4096 --input-len 512 --output-len 64
    --num-iters 2 --json)
  for batch in 1 16; do
    step "verify_llama_b${batch}_k0" "$pagoda" bench --model bench/configs/llama-3-8b \
      --batch-size $batch "${common[@]}"
    for k in 1 2 3 4; do
      step "verify_llama_b${batch}_k$k" "$pagoda" bench --model bench/configs/llama-3-8b \
        --batch-size $batch "${common[@]}" --speculative-config \
        "{\"model\": \"bench/configs/llama-3.2-1b\", \"num_speculative_tokens\": $k}"
    done
  done
  step draft_e4b_k0 "$pagoda" bench --model bench/configs/gemma-4-e4b --batch-size 1 "${common[@]}"
  step draft_e4b_k3 "$pagoda" bench --model bench/configs/gemma-4-e4b --batch-size 1 \
    "${common[@]}" --speculative-config \
    '{"model": "bench/configs/gemma-4-e4b-assistant", "num_speculative_tokens": 3}'
  # One table: each spec run's drafting and verifying time against the plain step of its batch.
  python3 - "$out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def report(name):
    lines = (out / f"{name}.log").read_text().strip().splitlines()
    return json.loads(lines[-1]) if lines else None
print("| run | decode step (ms): mean, median, p99 | drafting (ms) | verifying (ms) | verify / plain step |")
print("|---|---|---|---|---|")
def steps(r):
    s = r["decode_step_ms"]
    return f"{s['mean']:.3f}, {s['median']:.3f}, {s['p99']:.3f}"
for plain, runs in [(f"verify_llama_b{b}_k0", [f"verify_llama_b{b}_k{k}" for k in (1, 2, 3, 4)])
                    for b in (1, 16)] + [("draft_e4b_k0", ["draft_e4b_k3"])]:
    base = report(plain)
    if base is None:
        continue
    step = base["decode_step_ms"]["mean"]
    print(f"| {plain} | {steps(base)} | - | - | - |")
    for run in runs:
        r = report(run)
        if r is None:
            continue
        spec = r["speculative"]
        print(f"| {run} | {steps(r)} | "
              f"{spec['draft_ms_per_decode_step']:.3f} | {spec['verify_ms_per_decode_step']:.3f} | "
              f"{spec['verify_ms_per_decode_step'] / step:.3f} |")
EOF
fi

if [ "$part" = profile ]; then
  # Only the timed iteration (bench opens a profiler range around it): the warm-up iteration has
  # timed every kernel choice and captured the graphs.
  common=(--model bench/configs/llama-3-8b --load-format dummy --device cuda --max-model-len 4096
    --input-len 512 --output-len 8 --num-iters 1 --warmup-iters 1 --batch-size 1)
  for k in 3 4; do
    step_tail=0 step "profile_k$k" ncu --profile-from-start off --clock-control none \
      --metrics gpu__time_duration.sum --csv --page raw \
      --print-units base "$pagoda" bench "${common[@]}" --speculative-config \
      "{\"model\": \"bench/configs/llama-3.2-1b\", \"num_speculative_tokens\": $k}"
  done
  python3 tools/ncu_kernels.py "$out/profile_k3.log" "$out/profile_k4.log"
fi

step_summary
exit $status
