# Sourced by the GPU check scripts, with $build and $out set: builds $build when it has no test
# binary, and defines step NAME COMMAND..., which runs the command with its log kept in $out,
# records pass or fail (a failure sets status=1) and shows the log's last $step_tail lines.
mkdir -p "$out"
if [ ! -x "$build/tests/pagoda_tests" ]; then
  source tools/install_deps.sh
  pagoda_install_deps
  pagoda_build "$build"
fi
status=0
step_tail=${step_tail:-25}
step() {
  local name=$1
  shift
  echo "== $name"
  if "$@" >"$out/$name.log" 2>&1; then
    echo "pass" >"$out/$name.status"
  else
    echo "FAIL" >"$out/$name.status"
    status=1
  fi
  tail -n "$step_tail" "$out/$name.log"
}

# The table of every step's result.
step_summary() {
  echo
  echo "| check | result |"
  echo "|---|---|"
  for f in "$out"/*.status; do
    echo "| $(basename "$f" .status) | $(cat "$f") |"
  done
}
