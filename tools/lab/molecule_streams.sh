#!/usr/bin/env bash
# make molecule's and make lab-suite's scenarios, in two streams under one session of the lab
# (tools/lab/session.sh):
#   tools/lab/molecule_streams.sh "<scenarios on ct200>" ["<scenarios on its twin ct240>" [lead command …]]
# With no twin scenarios, the first list runs alone, one after another. Otherwise:
#   1. the artifacts every scenario reads (the CUDA bundle and the DFlash tree) are staged on the
#      controller from the reference host, unless they are there (stage_artifacts.yml,
#      stage_artifacts_force=false; its output in build/stages/stage.log);
#   2. the twin's stream starts in the background with LAB_TARGET=ct240 (extensions/molecule/config.yml,
#      inventory/twin.yml), its output in build/stages/molecule-twin.log, printed when both are done;
#   3. beside it, the lead command (make lab-suite: make lab-test, which must leave the twin alone; it is
#      told so by DFLASH_LAB_BUSY=ct240), then the scenarios on ct200.
# The lab's work is mostly waiting on hosts and servers, so the streams overlap well on two cores.
# Each stream stops at its first failure, and the first stream does not start its scenarios after a
# failed lead command. A scenario starts with `molecule reset`: the state of an earlier run must not
# skip prepare. The exit status is the first stream's failure, else the twin's.
set -uo pipefail
cd "$(dirname "$0")/../../extensions"
base=(--base-config molecule/config.yml)

run() {
  local s start
  for s in "$@"; do
    echo "=== molecule scenario $s${LAB_TARGET:+ on $LAB_TARGET}"; start=$SECONDS
    molecule "${base[@]}" reset -s "$s" >/dev/null 2>&1
    molecule "${base[@]}" test -s "$s" --destroy never || return $?
    echo "=== $s: $((SECONDS - start)) s${LAB_TARGET:+ on $LAB_TARGET}"
  done
}

read -r -a first <<<"${1:-}"
read -r -a twin <<<"${2:-}"
lead=("${@:3}")
if [ "${#twin[@]}" -eq 0 ]; then
  if [ "${#lead[@]}" -gt 0 ]; then (cd .. && "${lead[@]}") || exit $?; fi
  run "${first[@]}"
  exit $?
fi

mkdir -p ../build/stages
t=$SECONDS
if ! (cd .. && ansible-playbook playbooks/stage_artifacts.yml -l ct129 -e dflash_source=overlay \
        -e stage_artifacts_force=false) >../build/stages/stage.log 2>&1; then
  tail -n 40 ../build/stages/stage.log
  echo "=== staging the artifacts from ct129 failed (build/stages/stage.log): no scenario ran"
  exit 1
fi
echo "=== artifacts staged for both streams: $((SECONDS - t)) s"

log=../build/stages/molecule-twin.log
echo "=== the twin's stream (${twin[*]}) on ct240, beside the rest; its output: build/stages/molecule-twin.log"
(export LAB_TARGET=ct240 LAB_INVENTORY_EXTRA=twin.yml; t=$SECONDS; run "${twin[@]}" && echo "=== twin stream: $((SECONDS - t)) s") \
  >"$log" 2>&1 &
pid=$!
status=0
t=$SECONDS
if [ "${#lead[@]}" -gt 0 ]; then
  (cd .. && DFLASH_LAB_BUSY=ct240 "${lead[@]}") || status=$?
  echo "=== ${lead[*]}: $((SECONDS - t)) s (exit $status)"
fi
if [ "$status" -eq 0 ]; then
  run "${first[@]}" || status=$?
fi
echo "=== first stream done after $((SECONDS - t)) s (exit $status); waiting for the twin's"
wait "$pid"
twin_status=$?
echo "=== output of the twin's stream (exit $twin_status)"
cat "$log"
[ "$status" -ne 0 ] && exit "$status"
exit "$twin_status"
