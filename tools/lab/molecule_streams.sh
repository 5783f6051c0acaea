#!/usr/bin/env bash
# make molecule's scenarios, in two streams under one session of the lab (tools/lab/session.sh):
#   tools/lab/molecule_streams.sh "<scenarios on ct200>" ["<scenarios on ct200's twin, ct240>"]
# Each stream runs its scenarios one after another and stops at its first failure. The twin's
# stream starts once the first scenario of the other passed (its prepare staged the artifacts both
# read), runs with LAB_TARGET=ct240 (extensions/molecule/config.yml, inventory/twin.yml) and prints
# its output when both are done. A scenario starts with `molecule reset`: the state of an earlier run
# must not skip prepare. The exit status is the first stream's failure, else the twin's.
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
if [ "${#twin[@]}" -eq 0 ]; then
  run "${first[@]}"
  exit $?
fi
if [ "${#first[@]}" -gt 0 ]; then
  run "${first[0]}" || exit $?
fi
log=../build/stages/molecule-twin.log
mkdir -p ../build/stages
echo "=== the twin's stream (${twin[*]}) on ct240, beside the rest; its output: build/stages/molecule-twin.log"
(export LAB_TARGET=ct240 LAB_INVENTORY_EXTRA=twin.yml; t=$SECONDS; run "${twin[@]}" && echo "=== twin stream: $((SECONDS - t)) s") \
  >"$log" 2>&1 &
pid=$!
status=0
t=$SECONDS
if [ "${#first[@]}" -gt 1 ]; then
  run "${first[@]:1}" || status=$?
fi
echo "=== ct200 stream done after $((SECONDS - t)) s (exit $status); waiting for the twin's"
wait "$pid"
twin_status=$?
echo "=== output of the twin's stream (exit $twin_status)"
cat "$log"
[ "$status" -ne 0 ] && exit "$status"
exit "$twin_status"
