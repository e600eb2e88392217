#!/usr/bin/env bash
# Times two pagoda binaries against each other on a GPU, on the `pagoda bench` cases of
# tools/gpu_check.sh: every case runs old, new, old, new, ... (ROUNDS pairs), so both binaries see
# the same machine in the same minutes. Prints each run's decode step mean and a table of the
# medians with new / old.
# Usage: bash tools/bench_compare.sh OLD_PAGODA NEW_PAGODA [ROUNDS]   (run from the repository root)
# BENCH_COMPARE_CASES="name ..." runs only the named cases (all by default).
set -uo pipefail
old=$1
new=$2
rounds=${3:-2}
out=${BENCH_COMPARE_OUT:-build/bench-compare}
mkdir -p "$out"

common=(--load-format dummy --device cuda --max-model-len 4096 --input-len 512 --output-len 128
  --json)
cases=(
  "llama_b1_graphs|--model bench/configs/llama-3-8b --batch-size 1 --num-iters 3"
  "llama_b1_eager|--model bench/configs/llama-3-8b --batch-size 1 --num-iters 3 --enforce-eager"
  "llama_b1_sampled|--model bench/configs/llama-3-8b --batch-size 1 --num-iters 2 --temperature 0.8 --top-p 0.95"
  "llama_b1_fp8|--model bench/configs/llama-3-8b --batch-size 1 --num-iters 3 --quantization fp8"
  "gemma_b1_graphs|--model bench/configs/gemma-4-e4b --batch-size 1 --num-iters 3"
  "llama_b64|--model bench/configs/llama-3-8b --batch-size 64 --num-iters 2"
)

# decode_step_ms.mean and prefill_time_ms of one --json report.
field() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["decode_step_ms"]["mean"], r["prefill_time_ms"])' "$1"
}

printf '| case | binary | decode step mean ms (each run) | median | prefill ms (median) |\n'
summary=()
for entry in "${cases[@]}"; do
  name=${entry%%|*}
  if [ -n "${BENCH_COMPARE_CASES:-}" ] && [[ " $BENCH_COMPARE_CASES " != *" $name "* ]]; then
    continue
  fi
  read -r -a args <<<"${entry#*|}"
  declare -A steps=() prefills=()
  for round in $(seq "$rounds"); do
    for which in old new; do
      binary=$old
      [ "$which" = new ] && binary=$new
      log="$out/${name}_${which}_${round}"
      if "$binary" bench "${args[@]}" "${common[@]}" >"$log.json" 2>"$log.err"; then
        read -r step prefill < <(field "$log.json")
        steps[$which]+="$step "
        prefills[$which]+="$prefill "
      else
        echo "FAIL: $which $name (see $log.err)"
        tail -n 3 "$log.err"
      fi
    done
  done
  median() { python3 -c 'import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f"{statistics.median(v):.4f}" if v else "nan")' $1; }
  old_median=$(median "${steps[old]:-}")
  new_median=$(median "${steps[new]:-}")
  for which in old new; do
    printf '| %s | %s | %s| %s | %s |\n' "$name" "$which" "${steps[$which]:-}" \
      "$(median "${steps[$which]:-}")" "$(median "${prefills[$which]:-}")"
  done
  summary+=("| $name | $old_median | $new_median | $(python3 -c "print(f'{$new_median / $old_median:.3f}')" 2>/dev/null) |")
  unset steps prefills
done
printf '\n| case | old decode step ms | new decode step ms | new / old |\n|---|---|---|---|\n'
printf '%s\n' "${summary[@]}"
