#!/usr/bin/env bash
# The deploy path on a real GPU host such as an H200 (validation steps 1-3 and 5):
# a real torch 2.11.0+cu130 venv, a real NVIDIA driver, no systemd, no network.
#
#   tests/gpu/deploy.sh            # from the repo root; results in $OUT (default /tmp/gpu-deploy-out)
#
# Inputs (in CARRY; `tests/gpu/device.sh deploy` sets CARRY=/tmp/gpu-kit; see docs/validation.md):
#   $CARRY/whl/            ansible-core 2.19 and the dependencies the machine lacks (py3.12 wheels; make gpu-kit)
#   (not built by make gpu-kit:)
#   $CARRY/deploy-wheelhouse/  the wheelhouse of the release, built for cp312 from the commit under
#                          test (python3.12 tests/fixtures/build.py): the fixture sglang 0.5.11 (what the
#                          default dflash_source=upstream locks; no dflash_source is passed here) with
#                          torch 2.11.0+cu128 / triton 3.6.0 / flashinfer-python and -cubin 0.6.8.post1 /
#                          cuda-tile 1.7.0, and sglang 0.5.9 with torch 2.9.1+cu128 / triton 3.5.1 /
#                          flashinfer 0.6.3 (dflash_source=overlay's base); the three nvidia-*-cu12 (+cu128
#                          so that cuda_overlay still transplants the reference's +cu130 bundle); and the
#                          REAL sglang-kernel 0.4.2 and sgl-kernel 0.3.21 wheels reduced by
#                          tests/gpu/reduce_wheel.py (recipe: docs/validation.md). Without sglang 0.5.11 the
#                          lock fails ("there is no version of sglang==0.5.11").
#   $CARRY/dflash-src.tar      the fixture DFlash sources (the machine's venv has no sglang to capture)
#
# Steps (STEPS=stage,deploy,again,start,pinoff by default; `config` only renders the unit, for a
# rehearsal without a GPU, with START_UNVERIFIED=1 to start an unverified release; NGPU=2 deploys two
# instances, on GPU 0 and GPU 1, and `third` then asks preflight about a third on the held GPU 0):
#   stage   playbooks/stage_artifacts.yml, local connection, reference venv $VENV: the CUDA bundle
#   deploy  playbooks/deploy_dflash.yml into a fresh release (preflight, build, overlays, kernel pin,
#           verification) -- systemd-only tasks skipped by tag (switch, readiness, absent)
#   again   the same deploy again: must report no change
#   start   `current` flipped as switch.yml would, then the unit's ExecStart run as systemd would run it
#           (tests/gpu/unit_exec.py), a common_ops kernel called inside the server process
#           (tests/gpu/kernel_hook) and /health_generate, /v1/models asked
#   pinoff  the same deploy with kernel_pin_enabled=false (PyPI's sgl-kernel 0.3.21 stays): must stop at
#           verification; then abi_check with features flashmla+spatial and a real load of those libraries.
#           Only sglang 0.5.9's lock (dflash_source=overlay) brings sgl-kernel 0.3.21; sglang 0.5.11, the
#           default, pins sglang-kernel 0.4.2, so under upstream there is no look-alike for the pin to
#           remove (this step has not run since upstream became the default)
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VENV:-/opt/torch/.venv}
CARRY=${CARRY:-$REPO/.gpu-carry}
OUT=${OUT:-/tmp/gpu-deploy-out}
WORK=${WORK:-/tmp/gpudeploy}
STEPS=${STEPS:-stage,deploy,again,start,pinoff}
WHEELHOUSE=${WHEELHOUSE:-$CARRY/deploy-wheelhouse}
ROOT=${ROOT:-}            # prefix of every host path (a rehearsal without a GPU uses a scratch root)
EXTRA_SKIP=${EXTRA_SKIP:-}  # more tags to skip (a rehearsal without a GPU skips preflight,sglang_service)
NGPU=${NGPU:-1}             # 2: two instances on GPU 0 and GPU 1 (validation step 4, two GPUs)
INSTANCES="qwen3-8b"
[ "$NGPU" -ge 2 ] && INSTANCES="qwen3-8b qwen3-8b-b"
INSTANCE=qwen3-8b           # the first one: pin-off and kernel checks use it
SKIP_SYSTEMD=sglang_service_switch,sglang_service_readiness,sglang_service_absent${EXTRA_SKIP:+,$EXTRA_SKIP}
RES=$WORK/results         # everything; packed into $OUT/deploy-results.tar.gz at the end
rm -rf "$RES" && mkdir -p "$OUT" "$RES"
log() { printf '[deploy %4ds] %s\n' "$SECONDS" "$*" | tee -a "$RES/steps.log"; }
has() { [[ ",$STEPS," == *",$1,"* ]]; }
PY=$VENV/bin/python3

# -- ansible on the machine, without leaking PYTHONPATH into the modules' processes
if [ ! -d "$WORK/site/ansible" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$CARRY"/whl/*.whl || exit 3
fi
mkdir -p "$WORK/bin" "$WORK/stub" "$WORK/coll/ansible_collections/dflash"
ln -sfn "$REPO" "$WORK/coll/ansible_collections/dflash/deploy"
cat > "$WORK/bin/ansible-playbook" <<EOF
#!$PY
import sys
sys.path.insert(0, "$WORK/site")
from ansible.cli.playbook import main
sys.exit(main())
EOF
chmod +x "$WORK/bin/ansible-playbook"
if ! command -v systemd-analyze >/dev/null; then
  # No systemd here: the unit template's validate step and the instance check have nothing to ask.
  printf '#!/bin/sh\necho "systemd-analyze: no systemd on this host (tests/gpu stub): not verified" >&2\nexit 0\n' \
    > "$WORK/stub/systemd-analyze"
  chmod +x "$WORK/stub/systemd-analyze"
  # the role runs it by absolute path with its own PATH (config.yml): on a throwaway GPU host only
  if [ -z "$ROOT" ] && command -v nvidia-smi >/dev/null && [ ! -e /usr/bin/systemd-analyze ]; then
    install -m 0755 "$WORK/stub/systemd-analyze" /usr/bin/systemd-analyze
  fi
  log "systemd-analyze stubbed (exit 0): unit files not verified by systemd"
fi
export PATH="$WORK/bin:$WORK/stub:$PATH"
export ANSIBLE_CONFIG="$REPO/ansible.cfg" ANSIBLE_COLLECTIONS_PATH="$WORK/coll"
export ANSIBLE_CALLBACK_PLUGINS="$REPO/tests/gpu/callback_plugins" ANSIBLE_CALLBACKS_ENABLED=gpu_record
export ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 ANSIBLE_LOCALHOST_WARNING=0

# -- inputs on the machine: wheelhouse, DFlash sources, model directories, the kernel hook
rm -rf "$WORK/wheelhouse" && mkdir -p "$WORK/wheelhouse" && cp "$WHEELHOUSE"/*.whl "$WORK/wheelhouse/"
mkdir -p "$WORK/artifacts" && tar -xf "$CARRY/dflash-src.tar" -C "$WORK/artifacts"
for m in Qwen3-8B Qwen3-8B-DFlash-b16; do
  mkdir -p "$ROOT/srv/models/$m" && echo '{"architectures": ["Qwen3ForCausalLM"], "max_position_embeddings": 32768}' \
    > "$ROOT/srv/models/$m/config.json"
done
HOOK=$ROOT/opt/dflash-gpucheck
install -d -m 0755 "$HOOK"
install -m 0644 "$REPO/tests/gpu/kernel_smoke.py" "$REPO/tests/gpu/kernel_hook/sitecustomize.py" "$HOOK/"
BASE=$ROOT/opt/dflash STATE=$ROOT/var/lib/dflash

# torch and everything it requires in the reference venv: the bundle must carry torch's pure
# dependencies too, because the fixture torch the release starts from (2.11.0+cu128 for the default
# sglang 0.5.11, 2.9.1+cu128 for 0.5.9) declares none of them
DISTS=$("$PY" - "$VENV" <<'EOF'
import json, sys, sysconfig
from importlib import metadata as md
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
sp = [p for p in sys.path if p.endswith("site-packages")]
inst = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions(path=sp)}
seen, todo = set(), [("torch", "")]
while todo:
    name, extra = todo.pop()
    name = canonicalize_name(name)
    if (name, extra) in seen or name not in inst:
        continue
    seen.add((name, extra))
    for line in inst[name].requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": extra}):
            todo += [(req.name, "")] + [(req.name, e) for e in req.extras]
print(json.dumps(sorted({n for n, _ in seen})))
EOF
)
log "bundle distributions: $DISTS"

cat > "$WORK/inventory.yml" <<EOF
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: /usr/bin/python3
    ansible_become: false
  children:
    dflash_reference:
      hosts:
        gpu-reference:
    dflash_targets:
      hosts:
        gpu-target:
EOF
# sglang_venv_default_stack_hashes: false: the fixture wheels share the real names and versions (sglang
# 0.5.11) but not their bytes, and the collection's hashes of the real files would refuse them
cat > "$WORK/vars.json" <<EOF
{
  "stage_artifacts_dir": "$WORK/artifacts",
  "stage_artifacts_remote_dir": "$BASE/artifacts/stage",
  "sglang_venv_base_dir": "$BASE",
  "kernel_pin_uv_path": "$BASE/tools/uv",
  "cuda_overlay_uv_path": "$BASE/tools/uv",
  "sglang_service_base_dir": "$BASE",
  "cuda_overlay_artifacts_dir": "$BASE/artifacts",
  "dflash_overlay_artifacts_dir": "$BASE/artifacts",
  "sglang_service_config_dir": "$ROOT/etc/dflash",
  "sglang_service_state_dir": "$STATE",
  "sglang_service_cache_dir": "$ROOT/var/cache/dflash",
  "stage_artifacts_distributions": $DISTS,
  "dflash_reference_venv": "$VENV",
  "cuda_overlay_bundle_controller_path": "$WORK/artifacts/cuda-cu130.tar",
  "dflash_overlay_source_dir": "$WORK/artifacts/dflash-src",
  "sglang_venv_source": "wheelhouse",
  "sglang_venv_wheelhouse_controller_dir": "$WORK/wheelhouse",
  "sglang_venv_default_stack_hashes": false,
  "sglang_venv_uv_controller_path": "$(command -v uv)",
  "sglang_venv_python": "/usr/bin/python3",
  "sglang_venv_keep_releases": 3,
  "host_preflight_min_free_gb": 5,
  "sglang_service_verify_import_timeout": 180,
  "host_lock_wait": 60,
  "sglang_service_instances": []
}
EOF
instance_json() {  # instance_json NAME GPU PORT
  cat <<EOF
{"name": "$1", "gpus": [$2], "port": $3,
 "model_path": "$ROOT/srv/models/Qwen3-8B", "draft_model_path": "$ROOT/srv/models/Qwen3-8B-DFlash-b16",
 "served_model_name": "$1-dflash", "extra_args": ["--disable-cuda-graph"],
 "environment": {"PYTHONPATH": "$HOOK", "DFLASH_GPU_CHECK_OUT": "$STATE/$1/gpu-check.json"}}
EOF
}
set_instances() {  # set_instances VARS.json INSTANCE_JSON...: the instance list of a vars file
  local f=$1; shift
  python3 - "$f" "$@" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
v["sglang_service_instances"] = [json.loads(a) for a in sys.argv[2:]]
json.dump(v, open(sys.argv[1], "w"), indent=1)
EOF
}
ARGS=(); i=0
for inst in $INSTANCES; do ARGS+=("$(instance_json "$inst" "$i" $((30001 + i)))"); i=$((i + 1)); done
set_instances "$WORK/vars.json" "${ARGS[@]}"

# dflash.deploy.instances' tasks_from: complete (the instance list with its defaults) carries the switch and readiness
# tags too, so --skip-tags of those skips it and verify/config find no instances_present: give the
# facts it would set as extra vars (computed the same way from the role's defaults).
emulate_instances() {  # emulate_instances VARS.json
  PYTHONPATH="$WORK/site" "$PY" - "$1" "$REPO/roles/instances/defaults/main.yml" <<'EOF'
import json, sys, yaml
path, defaults = sys.argv[1:3]
v = json.load(open(path))
d = yaml.safe_load(open(defaults))["sglang_service_instance_defaults"]
every = [dict(d, **i) for i in v["sglang_service_instances"]]
v["instances_all"] = every
v["instances_present"] = [i for i in every if i["state"] == "present"]
v["instances_absent"] = [i for i in every if i["state"] == "absent"]
json.dump(v, open(path, "w"), indent=1)
EOF
}
emulate_instances "$WORK/vars.json"
play() {  # play NAME VARS PLAYBOOK ARGS...: log to $RES/NAME.log, one JSON line per task to $RES/NAME.jsonl
  local name=$1 vars=$2 book=$3; shift 3
  local s; s=$(date +%s%N)
  GPU_RECORD_FILE="$RES/$name.jsonl" ansible-playbook -i "$WORK/inventory.yml" -e "@$vars" \
    "$REPO/playbooks/$book" "$@" > "$RES/$name.log" 2>&1
  local rc=$?
  log "$name: rc=$rc in $(( ($(date +%s%N) - s) / 1000000 )) ms; $(grep -A3 'PLAY RECAP' "$RES/$name.log" | tail -n +2 | tr -s ' ' | tr '\n' ' ')"
  grep -E '^(fatal|failed):' -A6 "$RES/$name.log" | grep -E 'fatal|failed|msg' | cut -c1-1500 | head -6 | tee -a "$RES/steps.log"
  return $rc
}

if has stage; then
  log "stage: playbooks/stage_artifacts.yml from $VENV"
  # the DFlash sources are already in place (fixture tree), so only the bundle is captured
  play stage "$WORK/vars.json" stage_artifacts.yml -e stage_artifacts_force=false
  ls -la "$WORK/artifacts/" | tee -a "$RES/steps.log"
fi
if has deploy; then
  log "deploy: playbooks/deploy_dflash.yml --skip-tags $SKIP_SYSTEMD"
  play deploy1 "$WORK/vars.json" deploy_dflash.yml --skip-tags "$SKIP_SYSTEMD"
fi
if has again; then
  log "deploy again (expect no change)"
  play deploy2 "$WORK/vars.json" deploy_dflash.yml --skip-tags "$SKIP_SYSTEMD"
fi
if has config; then  # rehearsal without a GPU: only sglang_service's config part (user, env file, launcher, unit)
  play config "$WORK/vars.json" deploy_dflash.yml --tags sglang_service \
    --skip-tags "sglang_service_verify,$SKIP_SYSTEMD"
fi
RELEASE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["release_id"])' \
  "$(ls -t "$BASE"/releases/*/.dflash-release/verified.json 2>/dev/null | head -1)" 2>/dev/null)
log "verified release: ${RELEASE:-none}"
if [ -z "$RELEASE" ] && [ -n "${START_UNVERIFIED:-}" ]; then  # rehearsal: start the newest release anyway
  RELEASE=$(basename "$(ls -td "$BASE"/releases/*/ | head -1)")
fi
SERVERS=()
stop_servers() {  # KillMode=mixed for each started instance: SIGTERM, then SIGKILL to its process group
  for pid in "${SERVERS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  sleep 3
  for pid in "${SERVERS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null; done
  SERVERS=()
}
KEEP=; has third && KEEP=--keep-running  # the servers must hold their GPUs while preflight looks
if has start && [ -n "$RELEASE" ]; then
  for inst in $INSTANCES; do
    # what switch.yml does (its systemd calls are what is missing here): current -> the verified release
    ln -sfn "$BASE/releases/$RELEASE" "$BASE/instances/$inst/current"
    rm -f "$STATE/$inst/gpu-check.json"
    sfx=; [ "$inst" != "$INSTANCE" ] && sfx="-$inst"
    log "start: ExecStart of sglang-dflash@$inst.service as its unit would run it"
    python3 "$REPO/tests/gpu/unit_exec.py" --unit /etc/systemd/system/sglang-dflash@.service --instance "$inst" \
      --log "$RES/server$sfx.log" --out "$RES/start$sfx.json" --timeout 240 $KEEP \
      --extra-file "$STATE/$inst/gpu-check.json" | tee -a "$RES/steps.log"
    log "start $inst: rc=${PIPESTATUS[0]}"
    pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("pid", ""))' "$RES/start$sfx.json" 2>/dev/null)
    [ -n "$pid" ] && SERVERS+=("$pid")
  done
  nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv 2>&1 | tee -a "$RES/steps.log"
fi
if has third; then
  # a third instance assigned to a GPU that a running process (the first instance's server) holds:
  # preflight must refuse it with one line
  cp "$WORK/vars.json" "$WORK/vars-third.json"
  set_instances "$WORK/vars-third.json" "$(instance_json qwen3-8b-c 0 30003)"
  emulate_instances "$WORK/vars-third.json"
  log "third instance on GPU 0 (held by the running qwen3-8b): preflight"
  play third "$WORK/vars-third.json" deploy_dflash.yml --tags preflight
  log "third: rc=$? (expected: not 0, refused by preflight)"
fi
stop_servers
if has pinoff; then
  log "pin off: kernel_pin_enabled=false, attention backend flashmla (declares flashmla_ops as used)"
  python3 - "$WORK/vars.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
v["kernel_pin_enabled"] = False
v["sglang_service_instances"][0]["attention_backend"] = "flashmla"
for key in ("instances_all", "instances_present"):
    v[key][0]["attention_backend"] = "flashmla"
json.dump(v, open(sys.argv[1].replace(".json", "-pinoff.json"), "w"), indent=1)
EOF
  play pinoff "$WORK/vars-pinoff.json" deploy_dflash.yml --skip-tags "$SKIP_SYSTEMD"
  log "pinoff: rc=$? (expected: not 0, stopped at verification)"
  PINREL=$(ls -td "$BASE"/releases/*/ | while read -r d; do
    [ ! -e "$d/.dflash-release/verified.json" ] && ls -d "$d"lib/python3*/site-packages/sgl_kernel >/dev/null 2>&1 \
      && echo "$d" && break
  done)
  PINREL=${PINREL%/}
  log "pin-off release: ${PINREL:-none}"
  if [ -n "$PINREL" ]; then
    SP=$(ls -d "$PINREL"/lib/python3*/site-packages)
    python3 - "$REPO" "$WORK" "$PINREL" "$RES/pinoff_abi.json" <<'EOF'
import json, subprocess, sys
repo, work, rel, out = sys.argv[1:5]
import glob
sp = glob.glob(rel + "/lib/python3*/site-packages")[0]
args = {"venv": rel, "packages": ["sgl_kernel"], "gpu_compute_capabilities": ["9.0"],
        "features": ["flashmla", "spatial"], "attention_backend": "flashmla",
        "environment": {"LD_LIBRARY_PATH": sp + "/nvidia/cu13/lib"}, "fail_on_error": False}
open(work + "/abi-args.json", "w").write(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": work + "/coll:" + work + "/site"}
p = subprocess.run(["/usr/bin/python3", repo + "/plugins/modules/abi_check.py", work + "/abi-args.json"],
                   capture_output=True, text=True, env=env)
try:
    res = json.loads(p.stdout)
except ValueError:
    res = {"failed": True, "stdout": p.stdout[-3000:], "stderr": p.stderr[-3000:]}
json.dump(res, open(out, "w"), indent=1, default=str)
print(json.dumps({k: res.get(k) for k in ("compatible", "msg")}, indent=1)[:3000])
EOF
    # the real loader, after `import torch`, in the environment the launcher gives the server
    env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$SP/nvidia/cu13/lib" CUDA_VISIBLE_DEVICES=0 \
      "$PINREL/bin/python" "$REPO/tests/gpu/kernel_smoke.py" --load "$SP/sgl_kernel/flashmla_ops.abi3.so" \
      --load "$SP/sgl_kernel/spatial_ops.abi3.so" --json "$RES/pinoff_load.json" > /dev/null 2>&1
    log "pinoff real load: rc=$? (expected 1)"
    python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["load"], indent=1))' \
      "$RES/pinoff_load.json" 2>&1 | cut -c1-600 | tee -a "$RES/steps.log"
  fi
fi
log "done"
tar -czf "$OUT/deploy-results.tar.gz" -C "$RES" .
cp "$RES/steps.log" "$OUT/steps.log"
