#!/usr/bin/env bash
# make test: run each stage (a make target) in order, stop at the first that
# fails, and print how long each took (the figures docs/test-runs.md records).
#
# A stage written a+b runs lanes at the same time: each lane is one target, or
# several joined by commas that run one after another (stopping at the first
# that fails). Each lane's output is kept in build/stages/<lane's first
# target>.log and printed when every lane has ended. make test puts the
# CPU-bound checks (lint, unit, ..., sanity) in a lane beside the lab tests,
# which mostly wait on containers and servers: the machine is about half busy
# during a lab run. A lane written ~x,y runs under SCHED_IDLE (`chrt --idle 0`,
# where chrt is) and `nice -n 19`: it takes the CPU the other lanes leave idle
# and yields it to them at once, so that the lab lane (the stage's long pole)
# runs as fast as it would alone.
set -uo pipefail
cd "$(dirname "$0")/.."
declare -a names times
status=0
t_all=$(date +%s)
timings=build/stages/times.txt
mkdir -p build/stages
: > "$timings"

run_lane() {  # the targets of one lane, in order; each one's time appended to $timings
  local t t0 rc
  local -a nice=()
  local spec=$1
  if [[ "$spec" == "~"* ]]; then
    nice=(nice -n 19)
    if command -v chrt >/dev/null && chrt --idle 0 true 2>/dev/null; then nice=(chrt --idle 0 nice -n 19); fi
    spec=${spec#"~"}
  fi
  IFS=, read -r -a lane <<<"$spec"
  for t in "${lane[@]}"; do
    echo "=== make $t${nice:+ (${nice[*]})}"
    t0=$(date +%s)
    "${nice[@]}" make --no-print-directory -o setup -o fixtures "$t"
    rc=$?
    echo "$t $(( $(date +%s) - t0 )) $rc" >> "$timings"
    [ "$rc" -eq 0 ] || return "$rc"
  done
}

lane_log() {  # where a lane's output goes: build/stages/<its first target>.log
  local l=${1#"~"}
  echo "build/stages/${l%%,*}.log"
}

run_group() {  # the lanes of one a+b stage, at once; the exit status of the first that failed
  local -a pids lanes
  local rc=0 i
  IFS=+ read -r -a lanes <<<"$1"
  # the toolchain and the fixtures once, first; the lanes then take them as made
  # (-o setup -o fixtures), so two makes never build either at the same time
  make --no-print-directory setup fixtures || return $?
  for l in "${lanes[@]}"; do
    echo "=== lane ${l//,/ then } (beside the rest of the stage; output in $(lane_log "$l"))"
    run_lane "$l" > "$(lane_log "$l")" 2>&1 &
    pids+=($!)
  done
  for i in "${!lanes[@]}"; do
    wait "${pids[$i]}"
    local one=$?
    echo "=== output of lane ${lanes[$i]//,/ then } (exit $one)"
    cat "$(lane_log "${lanes[$i]}")"
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
for i in "${!names[@]}"; do
  if [[ "${names[$i]}" == *+* ]]; then
    printf '  %-16s %5s  (at once:' "group" "${times[$i]}"
    IFS='+,' read -r -a parts <<<"${names[$i]//"~"/}"
    for p in "${parts[@]}"; do
      printf ' %s %s' "$p" "$(awk -v t="$p" '$1 == t {print $2 ($3 == 0 ? "" : " FAILED")}' "$timings")"
    done
    echo ")"
  else
    printf '  %-16s %5s\n' "${names[$i]}" "${times[$i]}"
  fi
done
printf '  %-16s %5s\n' "total" "$(( $(date +%s) - t_all ))"
exit "$status"
