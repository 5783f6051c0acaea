#!/usr/bin/env bash
# make test: run each stage (a make target) in order, stop at the first that
# fails, and print how long each took (the figures docs/testing.md reports).
# A stage written a+b runs its targets at the same time (each one's output is
# kept in build/stages/<target>.log and printed when all have ended): used for
# a CPU-bound stage beside one that mostly waits on the lab.
set -uo pipefail
cd "$(dirname "$0")/.."
declare -a names times
status=0
t_all=$(date +%s)
run_group() {  # targets of one a+b stage, at once; the exit status of the first that failed
  local -a pids targets
  local rc=0 i
  mkdir -p build/stages
  IFS=+ read -r -a targets <<<"$1"
  # the toolchain once, first; the targets then take it as made (-o setup), so two
  # makes never run tools/setup.sh at the same time
  make --no-print-directory setup || return $?
  for t in "${targets[@]}"; do
    echo "=== make $t (at the same time as the rest of $1; output in build/stages/$t.log)"
    make --no-print-directory -o setup "$t" > "build/stages/$t.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!targets[@]}"; do
    wait "${pids[$i]}"
    local one=$?
    echo "=== output of make ${targets[$i]} (exit $one)"
    cat "build/stages/${targets[$i]}.log"
    [ "$one" -ne 0 ] && [ "$rc" -eq 0 ] && rc=$one
  done
  return "$rc"
}
for stage in "$@"; do
  t0=$(date +%s)
  if [[ "$stage" == *+* ]]; then
    run_group "$stage"
    rc=$?
  else
    echo "=== make $stage"
    make --no-print-directory "$stage"
    rc=$?
  fi
  names+=("$stage"); times+=("$(( $(date +%s) - t0 ))")
  if [ "$rc" -ne 0 ]; then
    status=$rc
    echo "=== make $stage FAILED (exit $rc)"
    break
  fi
done
echo "=== stage times (seconds)"
for i in "${!names[@]}"; do printf '  %-16s %5s\n' "${names[$i]}" "${times[$i]}"; done
printf '  %-16s %5s\n' "total" "$(( $(date +%s) - t_all ))"
exit "$status"
