#!/usr/bin/env bash
# REAL SGLang with real DFlash, deployed by the collection on a GPU host (issue 21 item 4): a real
# torch 2.11.0+cu130 reference venv, a real NVIDIA driver, no systemd, no network.
#
#   tests/gpu/real_sglang.sh       # from the repo root; results in $OUT (default /tmp/real-sglang-out)
#
# Inputs: the GPU kit (`make gpu-kit`, tools/gpu_kit.py, from the pinned lists in tests/gpu/kit/),
# laid out in CARRY by tests/gpu/device.sh, which runs this script (docs/validation.md):
#   $CARRY/wheels-[abc].tar.xz   real wheels (cp312, manylinux x86_64) packed by tests/gpu/wheel_transport.py:
#                                a: sglang 0.5.11, flashinfer-python 0.6.8.post1, apache-tvm-ffi, transformers
#                                5.6.0, tokenizers 0.22.2 and the small wheels of sglang's import closure the
#                                machine's venv lacks; b: sglang-kernel 0.4.2 reduced by reduce_wheel.py to its
#                                Python files + sgl_kernel/sm90/common_ops.abi3.so; c (step surge):
#                                sglang-router 0.3.2 and the part of its closure the router's venv needs as files
#   $CARRY/whl/                  ansible-core 2.19 and what it needs (py3.12 wheels)
#   $CARRY/jit-cache-sm90.tar.gz (optional, no longer in the kit) JIT build trees restored for tiny-plain
# Steps (STEPS, default wheels,stage,deploy,serve,warm; `again` after deploy: AGAIN=3 no-change re-runs):
#   wheels  rebuild the carried wheels; tests/gpu/standin_wheels.py completes the wheelhouse so that
#           sglang 0.5.11's full requirement closure resolves offline (stand-ins, see that script): the
#           names the reference venv holds are bundled from it (real), the rest stay stand-ins
#   stage   playbooks/stage_artifacts.yml from $VENV: the bundle = torch's closure + those names
#   deploy  playbooks/deploy_dflash.yml, dflash_source=upstream, sglang_venv_source=wheelhouse, one
#           instance `tiny` (tiny random Qwen3 target + DFlash draft, make_tiny_model.py) on GPU 0;
#           systemd-only tasks skipped by tag (switch, readiness, absent), as tests/gpu/deploy.sh does
#   serve   `current` flipped as switch.yml would; the unit's ExecStart run as systemd would
#           (unit_exec.py) with the role's own readiness deciding: the module dflash.deploy.instance_ready,
#           its file run as a program with its options in a file (as deploy.sh runs abi_check); then
#           sglang_client.py: /generate, /v1/completions, /v1/chat/completions. In order:
#           1 tiny (DFLASH) with empty JIT caches; 2 tiny-plain (no draft; written by a config-only
#           play) with jit-cache-sm90.tar.gz restored into its cache dirs first when carried (not in the kit); the greedy outputs
#           of 1 and 2 compared token for token
#   warm    3 tiny restarted: its own JIT caches (kept in /var/cache/dflash/tiny) are warm
#   sdrouter (with SYSTEMD=1, needs the surge group for sglang-router 0.3.2) the router in front of tiny,
#           as the deploy installed and started it under systemd: unit, key, workers, a request through it
#   surge   (issue 26, instead of serve/warm; needs .gpu-carry/wheels-c.tar.xz, sglang-router 0.3.2 and
#           its closure) the surge upgrade of the rollout role's surge_up.yml / wave.yml /
#           surge_down.yml, step by step with the collection's own modules run as programs, behind the
#           real router the deploy installed (sglang_router, units written, started here as systemd
#           would), under a steady streaming load through the router, counted (load_client.py of the
#           router scenario): tiny ready and measured (its perf record), the router, the load; a new
#           configuration (--max-running-requests 16) written for tiny and for the surge worker
#           tiny-surge (same served model, port 30005, its cache seeded from tiny's); tiny-surge ready and
#           registered; tiny drained (worker_drain), stopped, started on the new configuration, ready,
#           gated against its record (perf_probe), registered; tiny-surge drained and stopped.
#           One GPU: the surge worker shares GPU 0 with tiny (the collection refuses that; the harness
#           writes the surge worker as an instance of its own), so the gate's figures are measured
#           beside a busy second server. SURGE_LOAD_CONCURRENCY (4) streams, 30 tokens each
# SOURCE=overlay (steps wheels,stage,refuse,deploy,serve): sglang[all]==0.5.9 (needs
#   $CARRY/wheels-overlay*.tar.xz: sglang 0.5.9, transformers 4.57.1, huggingface-hub 0.36.2 and 1.33.0, pyyaml 6.0.1), the 0.5.11 tree
#   captured by the dflash_tree_capture module; `refuse` deploys it with
#   dflash_overlay_enabled=false and expects verification to refuse it; `serve` starts tiny (DFLASH)
# Rehearsal without a GPU: ROOT=/tmp/rh VENV=<any venv> STEPS=wheels,deploy
#   EXTRA_SKIP=preflight,cuda_overlay,sglang_service_verify SGLANG_PY=<a python3.12>
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VENV:-/opt/torch/.venv}
CARRY=${CARRY:-/tmp/gpu-kit}  # laid out by tests/gpu/device.sh from the carried kit
OUT=${OUT:-/tmp/real-sglang-out}
WORK=${WORK:-/tmp/realsgl}
STEPS=${STEPS:-wheels,stage,deploy,serve,warm}
ROOT=${ROOT:-}
EXTRA_SKIP=${EXTRA_SKIP:-}
SGLANG_PY=${SGLANG_PY:-/usr/bin/python3}
READY_TIMEOUT=${READY_TIMEOUT:-420}
DTYPE=${DTYPE:-bfloat16}  # float32: greedy DFLASH vs plain without bf16 near-ties
SOURCE=${SOURCE:-upstream}  # overlay: sglang[all] 0.5.9 + the 0.5.11 tree applied whole (steps refuse, deploy, serve)
SKIP_SYSTEMD=sglang_service_switch,sglang_service_readiness,sglang_service_absent,sglang_router_start,sglang_router_register${EXTRA_SKIP:+,$EXTRA_SKIP}
# SYSTEMD=1 (device.sh's systemd step: systemd is PID 1 of the namespaces this runs in): nothing skipped,
# the role switches, starts and checks readiness itself; the steps sdserve and rollback apply
# and deploy/again run as an operator would, no tag skipped (the stage phase finds the artifacts staged),
# so the run records what it converged to and the next one may take the fast path
[ "${SYSTEMD:-}" = 1 ] && SKIP_SYSTEMD=${EXTRA_SKIP:-dflash_gpu_no_tag}
DEPLOY_SKIP=(--skip-tags "stage,$SKIP_SYSTEMD")
[ "${SYSTEMD:-}" = 1 ] && [ -z "$EXTRA_SKIP" ] && DEPLOY_SKIP=()
ROUTER_PORT=${ROUTER_PORT:-30100} SURGE_PORT=${SURGE_PORT:-30005}
RES=$WORK/results
[ "${SYSTEMD:-}" = 1 ] && RES=$OUT/res  # comes back even when the call runs out of time
rm -rf "$RES" && mkdir -p "$OUT" "$RES"
log() { printf '[real-sglang %4ds] %s\n' "$SECONDS" "$*" | tee -a "$RES/steps.log" "$OUT/progress.log"; }
has() { [[ ",$STEPS," == *",$1,"* ]]; }
PY=$VENV/bin/python3
BASE=$ROOT/opt/dflash STATE=$ROOT/var/lib/dflash CACHE=$ROOT/var/cache/dflash CONF=$ROOT/etc/dflash

# -- ansible on the machine (as tests/gpu/deploy.sh)
if [ ! -d "$WORK/site/ansible" ] && ! "$PY" -c "import ansible" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$CARRY"/whl/*.whl || exit 3
fi
mkdir -p "$WORK/bin" "$WORK/stub" "$WORK/coll/ansible_collections/dflash"
ln -sfn "$REPO" "$WORK/coll/ansible_collections/dflash/deploy"
printf '#!%s\nimport sys\nsys.path.insert(0, "%s")\nfrom ansible.cli.playbook import main\nsys.exit(main())\n' \
  "$PY" "$WORK/site" > "$WORK/bin/ansible-playbook"
chmod +x "$WORK/bin/ansible-playbook"
if ! command -v systemd-analyze >/dev/null; then
  printf '#!/bin/sh\necho "systemd-analyze: no systemd on this host (tests/gpu stub): not verified" >&2\nexit 0\n' \
    > "$WORK/stub/systemd-analyze"
  chmod +x "$WORK/stub/systemd-analyze"
  # the role runs it by absolute path with its own PATH (config.yml): on a throwaway GPU host only
  if [ -z "$ROOT" ] && command -v nvidia-smi >/dev/null && [ ! -e /usr/bin/systemd-analyze ]; then
    install -m 0755 "$WORK/stub/systemd-analyze" /usr/bin/systemd-analyze
  fi
fi
UV=$(command -v uv || echo "$REPO/.venv/bin/uv")
export PATH="$WORK/bin:$WORK/stub:$PATH"
export ANSIBLE_CONFIG="$REPO/ansible.cfg" ANSIBLE_COLLECTIONS_PATH="$WORK/coll"
export ANSIBLE_CALLBACK_PLUGINS="$REPO/tests/gpu/callback_plugins" ANSIBLE_CALLBACKS_ENABLED=gpu_record
export ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 ANSIBLE_LOCALHOST_WARNING=0
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
CUDA_HOME_HOST=${NVCC:+$(dirname "$(dirname "$NVCC")")}
log "nvcc: ${NVCC:-none}; uv: $UV; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# -- the wheelhouse: the carried real wheels, completed by stand-ins
WH=$WORK/wheelhouse
if has wheels; then
  rm -rf "$WORK/dl" "$WH" && mkdir -p "$WH"
  python3 "$REPO/tests/gpu/wheel_transport.py" unpack "$CARRY"/wheels-[abc].tar.xz \
    $([ "$SOURCE" = overlay ] && echo "$CARRY"/wheels-overlay*.tar.xz) --out "$WORK/dl" > "$RES/wheels.log" \
    || { log "wheels: rebuild failed"; tail -3 "$RES/wheels.log"; exit 3; }
  cp "$WORK/dl"/*.whl "$WH/"
  REF=; [ -x "$PY" ] && REF=--reference-venv=$VENV
  # jsonschema (sglang's serving_chat) and dill (custom_logit_processor) are imported by sglang but
  # reach its closure only through requirements that are stand-ins here (outlines, datasets)
  if [ "$SOURCE" = overlay ]; then
    rm -f "$WH"/sglang-0.5.11-*.whl  # the DFlash tree comes from it, captured (below)
    "$PY" "$REPO/tests/gpu/standin_wheels.py" --wheelhouse "$WH" --root 'sglang[all]==0.5.9' --root jsonschema \
      --root dill $REF --out "$WH" --json "$RES/standins.json" 2>&1 | tee -a "$RES/steps.log"
    # kernel_pin installs the tree's declared stack from the wheelhouse, with what it requires
    # (flashinfer-python 0.6.8.post1: cuda-tile, nvidia-cutlass-dsl; transformers 5.6.0: a newer
    # huggingface-hub 1.x, carried beside 0.5.9's 0.36.2): real where carried or in the reference
    # venv, stand-ins for the rest
    "$PY" "$REPO/tests/gpu/standin_wheels.py" --wheelhouse "$WH" --root sglang-kernel==0.4.2 \
      --root flashinfer-python==0.6.8.post1 --root flashinfer-cubin==0.6.8.post1 --root transformers==5.6.0 \
      $REF --out "$WH" --json "$RES/standins-pin.json" 2>&1 | tail -3 | tee -a "$RES/steps.log"
  else
    rm -f "$WH"/sglang-0.5.9-*.whl "$WH"/transformers-4.57.1-*.whl "$WH"/huggingface_hub-0.36.2-*.whl
    "$PY" "$REPO/tests/gpu/standin_wheels.py" --wheelhouse "$WH" --root sglang==0.5.11 --root jsonschema \
      --root dill $REF --out "$WH" --json "$RES/standins.json" 2>&1 | tee -a "$RES/steps.log"
  fi
  log "wheels: $(ls "$WH" | wc -l) in the wheelhouse"
fi
# the bundle: what the reference venv holds of both closures (the base's and, with the overlay, the pins')
DISTS=$(python3 -c 'import json,os,sys; print(json.dumps(sorted({n for f in sys.argv[1:] if os.path.exists(f) for n in json.load(open(f))["bundle"]})))' \
  "$RES/standins.json" "$RES/standins-pin.json" 2>/dev/null || echo '["torch"]')
[ "$DISTS" = "[]" ] && DISTS='["torch"]'

# -- inputs: tiny target and draft (standard library, deterministic), the DFlash tree placeholder
MODELS=$ROOT/srv/models/tiny
[ -f "$MODELS/MANIFEST.json" ] || python3 "$REPO/tests/gpu/make_tiny_model.py" --out "$MODELS" | tail -1 | tee -a "$RES/steps.log"
chmod -R a+rX "$ROOT/srv/models"
# stage_artifacts.yml captures the DFlash tree whenever the controller lacks one, also with
# dflash_source=upstream, which never uses it; the reference venv here has no sglang to capture
if [ "$SOURCE" = overlay ]; then
  # overlay: the product's capture module, dflash_tree_capture (what stage_artifacts.yml runs on the reference host), over a
  # reference venv holding sglang 0.5.11 and the stack it runs with (sglang-kernel 0.4.2, flashinfer
  # 0.6.8.post1): the whole sglang/ tree and a pyproject.toml declaring what it needs
  R511=$WORK/ref511 && rm -rf "$R511" "$WORK/artifacts/dflash-src" && mkdir -p "$R511/lib/python3.12/site-packages"
  touch "$R511/pyvenv.cfg"
  for w in "$WORK"/dl/sglang-0.5.11-*.whl "$WORK"/dl/sglang_kernel-0.4.2-*.whl "$WORK"/dl/flashinfer_python-0.6.8.post1-*.whl \
           "$WH"/flashinfer_cubin-0.6.8.post1-*.whl; do
    python3 -m zipfile -e "$w" "$R511/lib/python3.12/site-packages"
  done
  # the module file run as Ansible runs it on a host (an args file; ansible-core and the collection on
  # PYTHONPATH, as tests/gpu/deploy.sh runs abi_check)
  printf '{"ANSIBLE_MODULE_ARGS": {"venv": "%s", "dest": "%s"}}' "$R511" "$WORK/dflash-src.tar" > "$WORK/capture-args.json"
  PYTHONPATH="$WORK/coll:$WORK/site" "$PY" "$REPO/plugins/modules/dflash_tree_capture.py" "$WORK/capture-args.json" \
    | cut -c1-400 | tee -a "$RES/steps.log"
  mkdir -p "$WORK/artifacts/dflash-src/python" && tar -xf "$WORK/dflash-src.tar" -C "$WORK/artifacts/dflash-src/python"
  sed -n 1,12p "$WORK/artifacts/dflash-src/python/pyproject.toml" > "$RES/tree-pyproject.toml"
else
  mkdir -p "$WORK/artifacts/dflash-src/python/sglang"
  [ -f "$WORK/artifacts/dflash-src/python/pyproject.toml" ] || \
    printf '# placeholder: dflash_source=upstream uses no DFlash tree (tests/gpu/real_sglang.sh)\n' \
    > "$WORK/artifacts/dflash-src/python/pyproject.toml"
fi

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
EXTRA='["--dtype", "'"$DTYPE"'", "--sampling-backend", "pytorch", "--grammar-backend", "none",
  "--disable-cuda-graph", "--disable-piecewise-cuda-graph", "--mem-fraction-static", "0.2",
  "--max-total-tokens", "65536", "--max-running-requests", "8", "--context-length", "4096"]'
ENVS='{"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
  "TVM_FFI_DISABLE_TORCH_C_DLPACK": "1", "SGLANG_HEALTH_CHECK_TIMEOUT": "300"}'
instance_json() {  # NAME PORT DRAFT(0|1) [SERVED_NAME (NAME)] [MAX_RUNNING (8)]
  # with ROUTER (step surge) the instance shares GPU 0 with the surge worker: allow_shared_gpus. The
  # surge step's configuration plays also skip preflight, which refuses the port of a server that
  # unit_exec.py started (no unit holds it here)
  local served=${4:-$1} extra shared=false
  [ -n "${ROUTER:-}" ] && shared=true
  extra=$(echo "$EXTRA" | sed "s/\"--max-running-requests\", \"8\"/\"--max-running-requests\", \"${5:-8}\"/")
  if [ "$3" = 1 ]; then
    printf '{"name": "%s", "gpus": [0], "port": %s, "model_path": "%s/target", "draft_model_path": "%s/draft",
      "served_model_name": "%s", "attention_backend": "triton", "num_draft_tokens": 16, "allow_shared_gpus": %s,
      "extra_args": %s, "environment": %s}' "$1" "$2" "$MODELS" "$MODELS" "$served" "$shared" \
      "$(echo "$extra" | sed 's/]$/, "--speculative-draft-attention-backend", "triton"]/')" "$ENVS"
  else
    printf '{"name": "%s", "gpus": [0], "port": %s, "model_path": "%s/target", "served_model_name": "%s",
      "attention_backend": "triton", "allow_shared_gpus": %s, "extra_args": %s, "environment": %s}' \
      "$1" "$2" "$MODELS" "$served" "$shared" "$extra" "$ENVS"
  fi
}
write_vars() {  # FILE INSTANCE_JSON: the vars of a play, with the instance facts dflash.deploy.instances would set
  python3 - "$1" "$2" "$REPO/roles/instances/defaults/main.yml" <<EOF
import json, sys, yaml
path, inst, defaults = sys.argv[1:4]
v = {
  "dflash_source": "$SOURCE",
  "sglang_venv_sglang_version": "0.5.11",
  "sglang_venv_requirements": $([ "$SOURCE" = overlay ] && echo '["sglang[all]==0.5.9", "jsonschema", "dill"]' || echo '["sglang==0.5.11", "jsonschema", "dill"]'),
  "dflash_controller_dir": "$WORK",
  "stage_artifacts_dir": "$WORK/artifacts",
  "stage_artifacts_remote_dir": "$BASE/artifacts/stage",
  "stage_artifacts_distributions": $DISTS,
  "sglang_venv_base_dir": "$BASE",
  "kernel_pin_uv_path": "$BASE/tools/uv",
  "cuda_overlay_uv_path": "$BASE/tools/uv",
  "sglang_service_base_dir": "$BASE",
  "cuda_overlay_artifacts_dir": "$BASE/artifacts",
  "dflash_overlay_artifacts_dir": "$BASE/artifacts",
  "sglang_service_config_dir": "$CONF",
  "sglang_service_state_dir": "$STATE",
  "sglang_service_cache_dir": "$CACHE",
  "sglang_service_cuda_home": "${CUDA_HOME_HOST:-/usr/local/cuda}",
  "sglang_service_path": "${CUDA_HOME_HOST:-/usr/local/cuda}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
  "dflash_reference_venv": "$VENV",
  "cuda_overlay_bundle_controller_path": "$WORK/artifacts/cuda-cu130.tar",
  "dflash_overlay_source_dir": "$WORK/artifacts/dflash-src",
  "sglang_venv_source": "wheelhouse",
  "sglang_venv_wheelhouse_controller_dir": "$WH",
  # the real sglang wheels travel as their members (wheel_transport.py) and are rebuilt here: the same
  # members byte for byte, but another zip file, so not the sha256 the collection ships for the published
  # files (sglang 0.5.11 cp312 published 0cdf73e8…, rebuilt on the controller 91327ef9… on 2026-12-07); the
  # lock still pins the rebuilt ones. tests/unit/test_default_stack_hashes.py checks the kit's pins instead
  "sglang_venv_default_stack_hashes": False,
  "sglang_venv_uv_controller_path": "$UV",
  "sglang_venv_python": "$SGLANG_PY",
  "sglang_venv_keep_releases": 3,
  "host_preflight_min_free_gb": 5,
  "host_preflight_host_config": "warn",  # the GPU machine has its own /etc/uv/uv.toml and /etc/pip.conf; the wheelhouse needs no index
  "sglang_service_verify_import_timeout": 300,
  "sglang_service_readiness_timeout": $READY_TIMEOUT,
  "host_lock_wait": 60,
  "sglang_service_instances": [json.loads(inst)],
}
if "$([ -n "${ROUTER:-}" ] && echo 1)":  # the router in front (step surge): installed, its unit written
    v.update({"sglang_router_enabled": True,
              "sglang_router_models": {"tiny": {"port": $ROUTER_PORT, "prometheus_port": $((ROUTER_PORT - 1000))}}})
d = yaml.safe_load(open(defaults))["sglang_service_instance_defaults"]
every = [dict(d, **i) for i in v["sglang_service_instances"]]
v["instances_all"] = every
v["instances_present"] = [i for i in every if i["state"] == "present"]
v["instances_absent"] = []
json.dump(v, open(path, "w"), indent=1)
EOF
}
play() {  # NAME VARS PLAYBOOK ARGS...
  local name=$1 vars=$2 book=$3; shift 3
  local s; s=$(date +%s%N)
  GPU_RECORD_FILE="$RES/$name.jsonl" ansible-playbook -i "$WORK/inventory.yml" -e "@$vars" \
    "$REPO/playbooks/$book" "$@" > "$RES/$name.log" 2>&1
  local rc=$?
  log "$name: rc=$rc in $(( ($(date +%s%N) - s) / 1000000 )) ms; $(grep -A3 'PLAY RECAP' "$RES/$name.log" | tail -n +2 | tr -s ' ' | tr '\n' ' ')"
  grep -E '^(fatal|failed):' -A6 "$RES/$name.log" | grep -E 'fatal|failed|msg' | cut -c1-2500 | head -6 | tee -a "$RES/steps.log"
  return $rc
}
has surge && ROUTER=1
has sdrouter && ROUTER=1
write_vars "$WORK/vars.json" "$(instance_json tiny 30001 1)"

if has stage; then
  # The machine's venv differs from its RECORDs here and there: a __pycache__/*.pyc named but gone
  # (httpx 0.28.1), a file changed after its install (certifi's cacert.pem). site_packages_transplant
  # refuses to pack or to apply such a distribution. Compile the .pyc back and write the file's hash
  # as it is now into RECORD (torch, triton, nvidia-* and cuda-* are not rehashed: they packed as is).
  "$PY" - "$VENV" "$DISTS" <<'PYC' | tee -a "$RES/steps.log"
import base64, csv, glob, hashlib, io, json, os, py_compile, sys
from importlib import metadata as md
venv, names = sys.argv[1], set(json.loads(sys.argv[2]))
sp = glob.glob(venv + "/lib/python3*/site-packages")[0]
compiled, rehashed = [], []
for d in md.distributions(path=[sp]):
    name = d.metadata["Name"].lower().replace("_", "-")
    if name not in names:
        continue
    rec_path = [str(f) for f in d.files or [] if str(f).endswith(".dist-info/RECORD")]
    rows = list(csv.reader((d.read_text("RECORD") or "").splitlines()))
    changed = False
    for row in rows:
        rel = row[0] if row else ""
        path = os.path.join(sp, rel)
        if "/__pycache__/" in rel and rel.endswith(".pyc") and not os.path.exists(path):
            src = os.path.join(os.path.dirname(os.path.dirname(path)), os.path.basename(path).split(".")[0] + ".py")
            if os.path.exists(src):
                py_compile.compile(src, cfile=path, doraise=True)
                compiled.append(rel)
        elif (len(row) > 2 and row[1].startswith("sha256=") and os.path.isfile(path)
              and not name.startswith(("torch", "triton", "nvidia-", "cuda-"))):
            data = open(path, "rb").read()
            digest = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if digest != row[1]:
                row[1], row[2] = digest, str(len(data))
                rehashed.append(rel)
                changed = True
    if changed and rec_path:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        open(os.path.join(sp, rec_path[0]), "w").write(buf.getvalue())
print(f"reference venv: {len(compiled)} .pyc named by RECORD but missing, compiled back {compiled[:5]}; "
      f"{len(rehashed)} files changed since their install, RECORD rehashed {rehashed[:5]}")
PYC
  rm -f "$WORK/artifacts/cuda-cu130.tar"
  log "stage: playbooks/stage_artifacts.yml from $VENV: $DISTS"
  play stage "$WORK/vars.json" stage_artifacts.yml -e stage_artifacts_force=false
fi
if has refuse; then
  # sglang 0.5.9 beside sglang-kernel 0.4.2 without the tree: verification must refuse it, naming
  # what 0.5.9 imports from sgl_kernel that 0.4.2 lacks, before anything is switched or started.
  # With the overlay off kernel_pin reads no declaration (it installed nothing on 2026-12-01), so the
  # pins are given here.
  python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); v["dflash_overlay_enabled"]=False; v["kernel_pin_packages"]=["sglang-kernel==0.4.2", "flashinfer-python==0.6.8.post1", "flashinfer-cubin==0.6.8.post1"]; json.dump(v, open(sys.argv[2], "w"))' \
    "$WORK/vars.json" "$WORK/vars-refuse.json"
  log "refuse: dflash_source=overlay, dflash_overlay_enabled=false (sglang 0.5.9 + sglang-kernel 0.4.2, no tree)"
  play refuse "$WORK/vars-refuse.json" deploy_dflash.yml --skip-tags "stage,$SKIP_SYSTEMD"
  log "refuse: rc=$? (expected: not 0, refused by verification); started servers: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | wc -l); current: $(readlink "$BASE/instances/tiny/current" 2>/dev/null || echo none)"
  grep -m1 -oE 'is not verified[^"]{0,3000}' "$RES/refuse.log" > "$RES/refuse-msg.txt"
fi
if has deploy; then
  log "deploy: playbooks/deploy_dflash.yml (dflash_source=$SOURCE) ${DEPLOY_SKIP[*]}"
  play deploy "$WORK/vars.json" deploy_dflash.yml "${DEPLOY_SKIP[@]}"
  # Issue 25 item 3 on a local connection: the push task against `cp` of the same bytes to the same
  # directory, right after it (the controller's bundle is in the page cache for both).
  if [ -f "$WORK/artifacts/cuda-cu130.tar" ] && [ -d "$BASE/artifacts" ]; then
    s=$(date +%s%N); cp "$WORK/artifacts/cuda-cu130.tar" "$BASE/artifacts/cp-baseline.tar"
    cp_ms=$(( ($(date +%s%N) - s) / 1000000 )); rm -f "$BASE/artifacts/cp-baseline.tar"
    push_s=$(python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("task", "").endswith("Push the bundle") and r.get("status") != "skipped":
        print(r["seconds"]); break' "$RES/deploy.jsonl" 2>/dev/null)
    log "push: the task ${push_s:-?} s; cp of the same $(stat -c %s "$WORK/artifacts/cuda-cu130.tar") bytes ${cp_ms} ms"
    # where the bytes were and went: the controller's bundle, Ansible's remote tmp, dest (device numbers: one
    # filesystem or several)
    log "push: filesystems $(stat -c '%d:%n' "$WORK/artifacts" "${HOME:-/root}/.ansible/tmp" "$BASE/artifacts" 2>/dev/null | tr '\n' ' ')"
  fi
fi
if has again; then  # the no-change re-run (issue 25): AGAIN times, each must change nothing
  for i in $(seq 1 "${AGAIN:-3}"); do
    log "again $i: the same deploy, nothing to do"
    play "again$i" "$WORK/vars.json" deploy_dflash.yml "${DEPLOY_SKIP[@]}"
    grep -qE 'changed=0 ' "$RES/again$i.log" || log "again $i: CHANGED something (must not)"
    grep -E 'verified before|fast path|^  time:' "$RES/again$i.log" | tr -s ' ' | cut -c1-300 | tee -a "$RES/steps.log"
  done
fi
RELEASE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["release_id"])' \
  "$(ls -t "$BASE"/releases/*/.dflash-release/verified.json 2>/dev/null | head -1)" 2>/dev/null)
log "verified release: ${RELEASE:-none}"
if [ -n "$RELEASE" ]; then
  SP=$(ls -d "$BASE/releases/$RELEASE"/lib/python3*/site-packages)
  "$BASE/releases/$RELEASE/bin/python" - "$SP" > "$RES/release-dists.txt" <<'EOF'
import sys
from importlib import metadata as md
for d in sorted(md.distributions(path=[sys.argv[1]]), key=lambda d: d.metadata["Name"].lower()):
    stand = "stand-in" if (d.metadata.get("Summary") or "").startswith("stand-in") else ""
    print(d.metadata["Name"], d.version, stand)
EOF
  log "release $RELEASE: $(wc -l < "$RES/release-dists.txt") distributions, $(grep -c stand-in "$RES/release-dists.txt") stand-ins; $(grep -iE '^(sglang|sglang-kernel|flashinfer-python|transformers|torch|triton|apache-tvm-ffi) ' "$RES/release-dists.txt" | tr '\n' ';')"
fi

serve() {  # LABEL INSTANCE PORT: start as the unit would, the role's readiness decides, then the client
  local label=$1 inst=$2 port=$3
  ln -sfn "$BASE/releases/$RELEASE" "$BASE/instances/$inst/current"
  # The options the rollout's ready.yml gives dflash.deploy.instance_ready (interval 1 s instead of 5, for
  # resolution), in the file a module reads its arguments from. The module file runs as a program under
  # $PY, with the collection and ansible-core's module_utils (the carried wheels, else $PY's own) on
  # PYTHONPATH: it exits 0 when ready, 1 with its answer (reason, models, ...) when not. unit_exec.py runs the
  # server outside systemd, as the unit's User=: the listener check accepts that user's processes ("user").
  printf '{"ANSIBLE_MODULE_ARGS": {"base": "http://127.0.0.1:%s", "model": "%s", "unit": "sglang-dflash@%s.service", "timeout": %s, "interval": 1, "max_restarts": 0, "env_file": "%s/%s.env", "user": "%s"}}' \
    "$port" "$inst" "$inst" "$READY_TIMEOUT" "$CONF" "$inst" "${SERVICE_USER:-sglang}" > "$RES/ready-$label.args.json"
  log "$label: ExecStart of sglang-dflash@$inst.service; readiness: dflash.deploy.instance_ready (interval 1 s)"
  python3 "$REPO/tests/gpu/unit_exec.py" --unit /etc/systemd/system/sglang-dflash@.service --instance "$inst" \
    --log "$RES/server-$label.log" --out "$RES/start-$label.json" --keep-running \
    --ready env PYTHONPATH="$WORK/coll:$WORK/site" "$PY" "$REPO/plugins/modules/instance_ready.py" \
    "$RES/ready-$label.args.json" > /dev/null
  local rc=$? pid
  python3 - "$RES/start-$label.json" <<'EOF' | tee -a "$RES/steps.log"
import json, sys
r = json.load(open(sys.argv[1]))
a = r.get("answers", {}).get("ready", {})
v = a.get("result") or {}
answer = {k: v[k] for k in ("ready", "health", "models", "restarts", "reason", "seconds") if k in v} or v
print(f"  ready rc={a.get('rc')} after {a.get('after_s')} s (instance_ready: {json.dumps(answer)[:600]}); "
      f"user={r.get('user')} exited_early={r.get('exited_early')}")
if not r.get("ok"):
    print("  server log tail:", r.get("log_tail", "")[-2500:])
EOF
  pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("pid", ""))' "$RES/start-$label.json" 2>/dev/null)
  if [ "$rc" = 0 ]; then
    python3 "$REPO/tests/gpu/sglang_client.py" --port "$port" --model "$inst" --out "$RES/client-$label.json" \
      2>&1 | tee -a "$RES/steps.log"
  fi
  grep -m2 -iE "DFLASH|speculative" "$RES/server-$label.log" | cut -c1-300 | tee -a "$RES/steps.log"
  if [ -n "$pid" ]; then  # KillMode=mixed
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$pid" 2>/dev/null
  fi
  for _ in $(seq 20); do nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -q . || break; sleep 1; done
  return "$rc"
}
if has serve && [ -n "$RELEASE" ] && [ "$SOURCE" = overlay ]; then
  serve overlay-dflash tiny 30001
  "$BASE/releases/$RELEASE/bin/python" -c 'import importlib.metadata as m, sglang.version as v; print("release sglang dist-info", m.version("sglang"), "tree", v.__version__, "transformers", m.version("transformers"))' 2>&1 | tail -1 | tee -a "$RES/steps.log"
elif has serve && [ -n "$RELEASE" ]; then
  serve dflash-cold tiny 30001
  log "jit caches of tiny after its first run: $(du -sh "$CACHE/tiny"/* 2>/dev/null | tr '\t\n' ' ')"
  log "config play: instance tiny-plain (no draft) on GPU 0, port 30002"
  write_vars "$WORK/vars-plain.json" "$(instance_json tiny-plain 30002 0)"
  play config-plain "$WORK/vars-plain.json" deploy_dflash.yml --tags sglang_service \
    --skip-tags "sglang_service_verify,stage,$SKIP_SYSTEMD"
  mkdir -p "$CACHE/tiny-plain"
  if [ -f "$CARRY/jit-cache-sm90.tar.gz" ]; then
    tar -xzf "$CARRY/jit-cache-sm90.tar.gz" -C "$CACHE/tiny-plain" && find "$CACHE/tiny-plain" -exec touch {} + \
      && chown -R "$(stat -c %U:%G "$CACHE/tiny-plain")" "$CACHE/tiny-plain"
    log "restored jit-cache-sm90.tar.gz into $CACHE/tiny-plain: $(du -sh "$CACHE/tiny-plain"/* 2>/dev/null | tr '\t\n' ' ')"
  else
    log "no jit-cache-sm90.tar.gz in $CARRY: tiny-plain starts with empty JIT caches"
  fi
  serve plain-restored tiny-plain 30002
  python3 "$REPO/tests/gpu/sglang_client.py" --compare "$RES/client-dflash-cold.json" "$RES/client-plain-restored.json" \
    --out "$RES/greedy-equal.json" 2>&1 | tee -a "$RES/steps.log"
  tar -czf "$OUT/results.tar.gz" -C "$RES" .
  has warm && serve dflash-warm tiny 30001
  log "jit caches after: tiny $(du -sh "$CACHE/tiny" | cut -f1), tiny-plain $(du -sh "$CACHE/tiny-plain" | cut -f1)"
fi
# -- under systemd (SYSTEMD=1): the deploy above ran the role's switch and readiness itself
sd_ready() {  # LABEL: the role's readiness module on tiny's unit; prints its seconds
  printf '{"ANSIBLE_MODULE_ARGS": {"base": "http://127.0.0.1:30001", "model": "tiny", "unit": "sglang-dflash@tiny.service", "timeout": %s, "interval": 1, "max_restarts": 0, "env_file": "%s/tiny.env"}}' \
    "$READY_TIMEOUT" "$CONF" > "$RES/ready-$1.args.json"
  PYTHONPATH="$WORK/coll:$WORK/site" "$PY" "$REPO/plugins/modules/instance_ready.py" "$RES/ready-$1.args.json" > "$RES/ready-$1.json"
}
sd_unit() { log "systemd: sglang-dflash@tiny $(systemctl show -p ActiveState,MainPID,NRestarts,DevicePolicy --value sglang-dflash@tiny.service | tr '\n' ' ')current=$(readlink "$BASE/instances/tiny/current" | xargs basename 2>/dev/null)"; }
if [ "${SYSTEMD:-}" = 1 ] && [ -n "$RELEASE" ] && has sdserve; then
  sd_unit
  systemctl cat sglang-dflash@tiny.service > "$RES/unit.txt" 2>&1
  log "DeviceAllow: $(systemctl show -p DeviceAllow --value sglang-dflash@tiny.service | cut -c1-400)"
  python3 "$REPO/tests/gpu/sglang_client.py" --port 30001 --model tiny --out "$RES/client-systemd.json" 2>&1 | tee -a "$RES/steps.log"
  for i in 1 2; do  # restart to ready with the instance's own (warm) caches
    s=$(date +%s%N); systemctl restart sglang-dflash@tiny.service; sd_ready "restart$i"; rc=$?
    log "restart $i: systemctl restart to ready (instance_ready rc=$rc): $(( ($(date +%s%N) - s) / 1000000 )) ms"
  done
  journalctl -u sglang-dflash@tiny.service --no-pager -o short-monotonic > "$RES/journal-tiny.txt" 2>&1
  grep -E "Load weight (begin|end)|fired up|ready to roll|Application startup complete" "$RES/journal-tiny.txt" | cut -c1-200 | tail -12 | tee -a "$RES/steps.log"
fi
if [ "${SYSTEMD:-}" = 1 ] && [ -n "$RELEASE" ] && has rollback; then
  # a configuration whose server fails readiness (an argument sglang's parser refuses, so the server
  # exits at once): the play must fail naming it, and put back the configuration and the server
  python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); i=v["sglang_service_instances"][0]; i["extra_args"]=i["extra_args"]+["--kv-cache-dtype", "no_such_dtype"]; v["instances_all"]=v["instances_present"]=[dict(v["instances_present"][0], extra_args=i["extra_args"])]; v["sglang_service_readiness_timeout"]=120; json.dump(v, open(sys.argv[2], "w"))' \
    "$WORK/vars.json" "$WORK/vars-bad.json"
  before=$(sha256sum "$CONF/tiny.env" | cut -c1-16)
  log "rollback: --kv-cache-dtype no_such_dtype added; env file before $before"
  play rollback "$WORK/vars-bad.json" deploy_dflash.yml --skip-tags "stage,$SKIP_SYSTEMD"
  log "rollback: play rc=$? (expected not 0); env file after $(sha256sum "$CONF/tiny.env" | cut -c1-16)"
  grep -oE '(rolled back|restored|not ready)[^"]{0,400}' "$RES/rollback.log" | head -3 | tee -a "$RES/steps.log"
  sd_unit
  sd_ready after-rollback; log "after the rollback: instance_ready rc=$?"
  python3 "$REPO/tests/gpu/sglang_client.py" --port 30001 --model tiny --out "$RES/client-after-rollback.json" 2>&1 | tail -2 | tee -a "$RES/steps.log"
fi
if [ "${SYSTEMD:-}" = 1 ] && [ -n "$RELEASE" ] && has sdrouter; then
  # The managed router the deploy installed, started and registered tiny with, under systemd (issue 45
  # item 2): its unit active as the service user without devices, its worker API closed without the
  # control-plane key (401) and open with it, tiny its one worker, a request through it answered.
  RUNIT=sglang-router@tiny.service RURL=http://127.0.0.1:$ROUTER_PORT
  log "router: $RUNIT $(systemctl show -p ActiveState,MainPID,User,DevicePolicy,NRestarts --value "$RUNIT" | tr '\n' ' ')"
  systemctl cat "$RUNIT" > "$RES/router-unit.txt" 2>&1
  KEY=$(sed -n 's/^SGLANG_ROUTER_CONTROL_PLANE_API_KEY=//p' "$CONF/router/tiny.env")
  log "router: GET /workers without the key: $(curl -s -o /dev/null -w '%{http_code}' "$RURL/workers"); with it: $(curl -s -H "Authorization: Bearer $KEY" "$RURL/workers" | tee "$RES/router-workers.json" | cut -c1-300)"
  log "router: POST /workers without the key: $(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d '{"url": "http://127.0.0.1:39999"}' "$RURL/workers")"
  s=$(date +%s%N)
  log "router: POST /generate through it: $(curl -s -m 120 -X POST -H 'Content-Type: application/json' -d '{"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}' "$RURL/generate" | cut -c1-300) in $(( ($(date +%s%N) - s) / 1000000 )) ms"
  log "router: listening $(grep -c ' 0100007F:7594 00000000:0000 0A ' /proc/net/tcp) on 127.0.0.1:$ROUTER_PORT, $(grep -c ' 00000000:7594 00000000:0000 0A ' /proc/net/tcp) on 0.0.0.0"
  journalctl -u "$RUNIT" --no-pager -o short-monotonic > "$RES/journal-router.txt" 2>&1
fi
# -- surge (issue 26): the surge upgrade behind the real router, step by step, the load counted
module() {  # LABEL MODULE ARGS_JSON: a module file run as a program (as serve() runs instance_ready)
  printf '{"ANSIBLE_MODULE_ARGS": %s}' "$3" > "$RES/$1.args.json"
  local s; s=$(date +%s%N)
  PYTHONPATH="$WORK/coll:$WORK/site" "$PY" "$REPO/plugins/modules/$2.py" "$RES/$1.args.json" > "$RES/$1.json" 2>&1
  local rc=$?
  log "$1 ($2): rc=$rc in $(( ($(date +%s%N) - s) / 1000000 )) ms: $(python3 -c 'import json,sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    print(open(sys.argv[1]).read()[-600:]); raise SystemExit
print(json.dumps({k: r[k] for k in ("msg", "changed", "failed", "drained", "timed_out", "seconds", "in_flight",
                  "reason", "verdict", "figures", "baseline_release", "after", "added", "removed") if k in r})[:1200])' "$RES/$1.json")"
  return $rc
}
start_unit() {  # LABEL UNIT_FILE INSTANCE READY_ARGV...: ExecStart as systemd would, left running once ready
  local label=$1 unit=$2 inst=$3; shift 3
  local s; s=$(date +%s%N)
  python3 "$REPO/tests/gpu/unit_exec.py" --unit "$unit" --instance "$inst" --log "$RES/server-$label.log" \
    --out "$RES/start-$label.json" --keep-running --ready "$@" > /dev/null
  local rc=$?
  log "$label: $(basename "$unit") ($inst) ready rc=$rc after $(( ($(date +%s%N) - s) / 1000000 )) ms, pid $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("pid", ""))' "$RES/start-$label.json" 2>/dev/null)"
  [ "$rc" = 0 ] || python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("log_tail", "")[-2500:])' "$RES/start-$label.json" | tee -a "$RES/steps.log"
  return $rc
}
stop_unit() {  # LABEL: KillMode=mixed, as serve() stops its server
  local pid; pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("pid", ""))' "$RES/start-$1.json" 2>/dev/null)
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null
  log "$1: stopped (pid $pid)"
}
ready_argv() {  # PORT SERVED UNIT_INSTANCE: instance_ready's argv, with the options the rollout's ready.yml gives it
  printf '{"ANSIBLE_MODULE_ARGS": {"base": "http://127.0.0.1:%s", "model": "%s", "unit": "sglang-dflash@%s.service", "timeout": %s, "interval": 1, "max_restarts": 0, "env_file": "%s/%s.env"}}' \
    "$1" "$2" "$3" "$READY_TIMEOUT" "$CONF" "$3" > "$RES/ready-$3-$1.args.json"
  echo env PYTHONPATH="$WORK/coll:$WORK/site" "$PY" "$REPO/plugins/modules/instance_ready.py" "$RES/ready-$3-$1.args.json"
}
if has surge && [ -n "$RELEASE" ]; then
  UNIT=/etc/systemd/system/sglang-dflash@.service
  RUNIT=/etc/systemd/system/sglang-router@tiny.service
  RURL=http://127.0.0.1:$ROUTER_PORT
  META=$BASE/releases/$RELEASE/.dflash-release
  UUID0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 2>/dev/null | tr -d ' ')
  LOADOUT=$RES/surge-load.json STOP=$RES/surge-load.stop
  log "surge: router unit $(ls "$RUNIT" 2>/dev/null || echo MISSING), workers at start: $(cat "$CONF/router/tiny.workers" 2>/dev/null); router venv: $(cat /opt/dflash/router/*/built.json 2>/dev/null | tr -d '\n ')"
  # The surge worker's and the new configuration's env files, by config-only plays (the collection's
  # surge_up.yml writes sglang-dflash@tiny.surge's; it refuses a surge on the instance's own GPU)
  write_vars "$WORK/vars-surge.json" "$(instance_json tiny-surge "$SURGE_PORT" 1 tiny 16)"
  play config-surge "$WORK/vars-surge.json" deploy_dflash.yml --tags sglang_service \
    --skip-tags "preflight,sglang_service_verify,stage,$SKIP_SYSTEMD"
  ln -sfn "$BASE/releases/$RELEASE" "$BASE/instances/tiny/current"
  ln -sfn "$BASE/releases/$RELEASE" "$BASE/instances/tiny-surge/current"
  # 1 tiny on its first configuration, its record as a first deploy promotes it
  start_unit tiny-1 "$UNIT" tiny $(ready_argv 30001 tiny tiny) || { log "surge: tiny never ready, nothing more to prove"; STEPS=; }
fi
if has surge && [ -n "$RELEASE" ]; then
  module perf-first perf_probe "{\"port\": 30001, \"unit\": \"sglang-dflash@tiny.service\", \"user\": \"sglang\", \"env_file\": \"$CONF/tiny.env\", \"release\": \"$RELEASE\", \"gpus\": [\"$UUID0\"], \"record\": \"$META/perf-tiny.next.json\"}" \
    && mv "$META/perf-tiny.next.json" "$META/perf-tiny.json"
  # 2 the router, as its unit runs it; its workers at start are tiny's
  start_unit router "$RUNIT" tiny python3 -c 'import sys, time, urllib.request
for _ in range(60):
    try:
        urllib.request.urlopen(sys.argv[1] + "/health", timeout=2); print("{\"ready\": true}"); sys.exit(0)
    except Exception:
        time.sleep(1)
sys.exit(1)' "$RURL"
  module register-tiny router_workers "{\"url\": \"$RURL\", \"workers\": [\"http://127.0.0.1:30001\"], \"state\": \"exact\", \"timeout\": 120, \"key_file\": \"$CONF/router/tiny.env\"}"
  # 3 the load, through the router, for the whole upgrade
  rm -f "$STOP"
  python3 "$REPO/extensions/molecule/router/files/load_client.py" --url "$RURL" --out "$LOADOUT" --stop-file "$STOP" \
    --concurrency "${SURGE_LOAD_CONCURRENCY:-4}" --max-new-tokens 30 > "$RES/load.log" 2>&1 &
  LOADPID=$!
  sleep 5
  log "surge: load running: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print({k: r[k] for k in ("requests", "ok", "cut", "refused", "failed")})' "$LOADOUT" 2>/dev/null)"
  # 4 the new configuration for tiny (written while it runs, as the deploy writes it)
  write_vars "$WORK/vars-new.json" "$(instance_json tiny 30001 1 tiny 16)"
  play config-new "$WORK/vars-new.json" deploy_dflash.yml --tags sglang_service \
    --skip-tags "preflight,sglang_service_verify,stage,$SKIP_SYSTEMD"
  # 5 surge_up: the surge worker (its JIT cache seeded from tiny's), ready, registered beside tiny
  mkdir -p "$CACHE/tiny-surge" && cp -a "$CACHE/tiny/." "$CACHE/tiny-surge/"
  if start_unit surge "$UNIT" tiny-surge $(ready_argv "$SURGE_PORT" tiny tiny-surge); then
    module register-surge router_workers "{\"url\": \"$RURL\", \"workers\": [\"http://127.0.0.1:$SURGE_PORT\"], \"state\": \"present\", \"timeout\": 120, \"key_file\": \"$CONF/router/tiny.env\"}"
    # 6 the wave: tiny drained out of the router, stopped, started on the new configuration
    module drain-tiny worker_drain "{\"url\": \"$RURL\", \"worker\": \"http://127.0.0.1:30001\", \"timeout\": 120, \"env_file\": \"$CONF/tiny.env\", \"key_file\": \"$CONF/router/tiny.env\"}"
    stop_unit tiny-1
    start_unit tiny-2 "$UNIT" tiny $(ready_argv 30001 tiny tiny)
    # 7 the gate against tiny's record (same release, same card), then promotion and registration
    module perf-gate perf_probe "{\"port\": 30001, \"unit\": \"sglang-dflash@tiny.service\", \"user\": \"sglang\", \"env_file\": \"$CONF/tiny.env\", \"release\": \"$RELEASE\", \"gpus\": [\"$UUID0\"], \"baseline\": \"$META/perf-tiny.json\", \"record\": \"$META/perf-tiny.next.json\"}"
    GATE=$?
    if [ "$GATE" = 0 ]; then
      mv "$META/perf-tiny.next.json" "$META/perf-tiny.json"
    else  # refused: back to the configuration it ran, restarted, as the rollout's roll_back.yml does
      rm -f "$META/perf-tiny.next.json"
      play config-back "$WORK/vars.json" deploy_dflash.yml --tags sglang_service \
        --skip-tags "preflight,sglang_service_verify,stage,$SKIP_SYSTEMD"
      stop_unit tiny-2
      start_unit tiny-3 "$UNIT" tiny $(ready_argv 30001 tiny tiny)
    fi
    module rejoin-tiny router_workers "{\"url\": \"$RURL\", \"workers\": [\"http://127.0.0.1:30001\"], \"state\": \"present\", \"timeout\": 120, \"key_file\": \"$CONF/router/tiny.env\"}"
    # 8 surge_down: the surge worker drained out and stopped
    module drain-surge worker_drain "{\"url\": \"$RURL\", \"worker\": \"http://127.0.0.1:$SURGE_PORT\", \"timeout\": 120, \"env_file\": \"$CONF/tiny-surge.env\", \"key_file\": \"$CONF/router/tiny.env\"}"
    stop_unit surge
  fi
  sleep 5
  touch "$STOP"; wait "$LOADPID"
  module workers-after router_workers "{\"url\": \"$RURL\", \"workers\": [\"http://127.0.0.1:30001\"], \"state\": \"exact\", \"timeout\": 30, \"key_file\": \"$CONF/router/tiny.env\"}"
  log "surge: load: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({k: r[k] for k in ("seconds", "requests", "ok", "cut", "refused", "failed", "refused_by_status", "examples")}))' "$LOADOUT" 2>/dev/null)"
  cp "$LOADOUT" "$OUT/surge-load.json" 2>/dev/null
  for l in tiny-1 surge tiny-2 tiny-3; do
    [ -f "$RES/server-$l.log" ] && log "$l: $(grep -m1 -oE "max_running_requests=[0-9]+" "$RES/server-$l.log")"
  done
  stop_unit tiny-2; stop_unit tiny-3; stop_unit router
fi
log "done"
python3 - "$RES" "$OUT/summary.json" <<'EOF'
import glob, json, os, sys
res, out = sys.argv[1:3]
s = {}
for f in sorted(glob.glob(res + "/start-*.json")):
    r = json.load(open(f))
    s.setdefault(os.path.basename(f)[6:-5], {})["ready"] = r.get("answers", {}).get("ready")
for f in sorted(glob.glob(res + "/client-*.json")):
    s.setdefault(os.path.basename(f)[7:-5], {})["client"] = json.load(open(f)).get("summary")
for f in ("greedy-equal.json", "standins.json"):
    try:
        s[f[:-5]] = json.load(open(os.path.join(res, f)))
    except (OSError, ValueError):
        pass
json.dump(s, open(out, "w"), indent=1)
EOF
tar -czf "$OUT/results.tar.gz" -C "$RES" .
cp "$RES/steps.log" "$OUT/steps.log"
