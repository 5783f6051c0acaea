#!/usr/bin/env bash
# make test: run each stage (a make target) in order, stop at the first that
# fails, and print how long each took (the figures docs/testing.md reports).
set -uo pipefail
cd "$(dirname "$0")/.."
declare -a names times
status=0
t_all=$(date +%s)
for stage in "$@"; do
  echo "=== make $stage"
  t0=$(date +%s)
  make --no-print-directory "$stage"
  rc=$?
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
