#!/usr/bin/env bash
# make molecule's scenarios, in two streams under one session of the lab (tools/lab/session.sh):
#   tools/lab/molecule_streams.sh "<scenarios on ct200>" ["<scenarios on ct200's twin, ct240>"]
# Each stream runs its scenarios one after another and stops at its first failure. With a twin
# stream, the artifacts both read (the CUDA bundle and the DFlash tree) are staged on the controller
# first, from the reference host, unless they are there (stage_artifacts.yml, stage_artifacts_force=false;
# its output in build/stages/stage.log); then both streams start at once. The twin's runs with
# LAB_TARGET=ct240 (extensions/molecule/config.yml, inventory/twin.yml) and its output is printed when
# both are done. A scenario starts with `molecule reset`: the state of an earlier run must not skip
# prepare. The exit status is the first stream's failure, else the twin's.
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
log=../build/stages/molecule-twin.log
mkdir -p ../build/stages
t=$SECONDS
if ! (cd .. && ansible-playbook playbooks/stage_artifacts.yml -l ct129 -e dflash_source=overlay \
        -e stage_artifacts_force=false) >../build/stages/stage.log 2>&1; then
  tail -n 40 ../build/stages/stage.log
  echo "=== staging the artifacts from ct129 failed (build/stages/stage.log): no scenario ran"
  exit 1
fi
echo "=== artifacts staged for both streams: $((SECONDS - t)) s"
echo "=== the twin's stream (${twin[*]}) on ct240, beside the rest; its output: build/stages/molecule-twin.log"
(export LAB_TARGET=ct240 LAB_INVENTORY_EXTRA=twin.yml; t=$SECONDS; run "${twin[@]}" && echo "=== twin stream: $((SECONDS - t)) s") \
  >"$log" 2>&1 &
pid=$!
status=0
t=$SECONDS
if [ "${#first[@]}" -gt 0 ]; then
  run "${first[@]}" || status=$?
fi
echo "=== ct200 stream done after $((SECONDS - t)) s (exit $status); waiting for the twin's"
wait "$pid"
twin_status=$?
echo "=== output of the twin's stream (exit $twin_status)"
cat "$log"
[ "$status" -ne 0 ] && exit "$status"
exit "$twin_status"
