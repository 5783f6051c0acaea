#!/usr/bin/env bash
# One entry for a GPU session, run from the repo root on the GPU machine (docs/validation.md):
#
#   tests/gpu/device.sh STEP...          # e.g. real:wheels,stage,deploy,serve,warm
#
# First, always, the kit: the archives `make gpu-kit` packed and the call carried
# (.gpu-carry/kit/<group>/*.tar.xz: base, and surge or overlay when the steps need them) are copied
# into $KIT (/tmp/gpu-kit: only /tmp survives between calls while the machine stays warm, so a later
# call on the same machine may carry nothing, or only another group); the ansible set (whl.tar.xz) is
# rebuilt into $KIT/whl by tests/gpu/wheel_transport.py (every member checked against its wheel's
# RECORD) and installed with $VENV's interpreter into $KIT/site (pip --target, no index), where
# validate.py imports it from. The other archives stay packed: real_sglang.sh rebuilds them itself.
# Then the steps, in the order given, each with its results in $OUT/<n>-<step>/:
#   validate          tests/gpu/validate.py (modules on the real venv and GPU; transplant; fatbin reader)
#   real[:STEPS]      tests/gpu/real_sglang.sh, CARRY=$KIT (STEPS comma-separated, else the script's own
#                     default); surge needs the surge group carried now or earlier
#   overlay[:STEPS]   the same with SOURCE=overlay (needs the overlay group)
#   deploy[:STEPS]    tests/gpu/deploy.sh, CARRY=$KIT: the fixture wheelhouse path; needs
#                     deploy-wheelhouse/ and dflash-src.tar, which the kit does not build: carried as
#                     .gpu-carry/deploy-wheelhouse and .gpu-carry/dflash-src.tar, copied into $KIT
#   kit               nothing more (the kit alone: what is there, rebuilt and installed)
#   systemd           systemd 252 from .gpu-carry/systemd-debs (make gpu-systemd-debs) booted as PID 1 of
#                     its own namespaces (tests/gpu/systemd_ns.sh), DeviceAllow checked on the real nodes;
#                     the steps after it run inside, with SYSTEMD=1 (real_sglang.sh: no tag skipped, the
#                     role's own switch, readiness and rollback under systemd)
# The JIT caches are not carried: restoring a cache built by another install did not save the
# compiles (docs/validation.md, 2026-12-01, finding 5); an instance's own cache under
# /var/cache/dflash/<instance> stays on the machine while it is warm.
# Environment: VENV (/opt/torch/.venv), KIT (/tmp/gpu-kit), OUT (/tmp/gpu-device-out).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VENV:-/opt/torch/.venv}
KIT=${KIT:-/tmp/gpu-kit}
OUT=${OUT:-/tmp/gpu-device-out}
PY=$VENV/bin/python3
[ "$#" -gt 0 ] || { sed -n '2,26p' "$0"; exit 2; }
for step in "$@"; do
  case ${step%%:*} in
    kit|systemd|validate|real|overlay|deploy) ;;
    *) echo "device.sh: unknown step '$step' (kit, systemd, validate, real[:STEPS], overlay[:STEPS], deploy[:STEPS])" >&2; exit 2 ;;
  esac
done
mkdir -p "$KIT" "$OUT"
log() { printf '[device %4ds] %s\n' "$SECONDS" "$*" | tee -a "$OUT/device.log"; }

# -- the kit
carried=$(ls "$REPO"/.gpu-carry/kit/*/*.tar.xz 2>/dev/null)
for a in $carried; do cp -p "$a" "$KIT/"; done
for extra in deploy-wheelhouse dflash-src.tar; do  # deploy.sh's fixture path, built by hand (not in the kit)
  [ -e "$REPO/.gpu-carry/$extra" ] && rm -rf "${KIT:?}/$extra" && cp -a "$REPO/.gpu-carry/$extra" "$KIT/"
done
log "kit: carried now: $(echo $carried | wc -w) archive(s); in $KIT: $(cd "$KIT" && ls -s --block-size=M ./*.tar.xz 2>/dev/null | tr '\n' ' ')"
[ -f "$KIT/whl.tar.xz" ] || { log "kit: no whl.tar.xz (the base group): carry .gpu-carry/kit/base after make gpu-kit"; exit 3; }
whl_sum=$(sha256sum "$KIT/whl.tar.xz" | cut -d' ' -f1)
if [ "$(cat "$KIT/whl/.done" 2>/dev/null)" != "$whl_sum" ]; then  # rebuilt and installed once per archive
  rm -rf "$KIT/whl" "$KIT/site"
  python3 "$REPO/tests/gpu/wheel_transport.py" unpack "$KIT/whl.tar.xz" --out "$KIT/whl" > "$OUT/kit-unpack.log" \
    || { log "kit: rebuilding whl.tar.xz failed"; tail -3 "$OUT/kit-unpack.log"; exit 3; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$KIT/site" "$KIT"/whl/*.whl \
    || { log "kit: installing ansible-core into $KIT/site failed"; exit 3; }
  echo "$whl_sum" > "$KIT/whl/.done"
fi
log "kit: $(ls "$KIT"/whl/*.whl | wc -l) wheels in $KIT/whl; ansible-core $(PYTHONPATH=$KIT/site "$PY" -c \
  'from ansible.release import __version__; print(__version__)') in $KIT/site"

# -- the steps
n=0 rc_all=0 IN=()
SDNS="$REPO/tests/gpu/systemd_ns.sh"
systemd_step() {  # install, boot, and the device filter on the real nodes: allowed, then closed
  bash "$SDNS" install "$REPO/.gpu-carry/systemd-debs" 2>&1 | grep -v non-portable || return 3
  bash "$SDNS" boot || return 4
  local smi allow="" n
  smi=$(command -v nvidia-smi)
  for n in /dev/nvidiactl /dev/nvidia0 /dev/nvidia-uvm /dev/nvidia-uvm-tools; do allow+="DeviceAllow=$n rw"$'\n'; done
  # a oneshot unit in /run/systemd/system of systemd's namespace (systemd-run needs D-Bus, not carried)
  probe() {  # NAME EXPECT PROPERTIES
    printf '[Service]\nType=oneshot\nDevicePolicy=closed\n%sExecStart=%s -L\n' "$3" "$smi" \
      | bash "$SDNS" exec sh -c "cat > /run/systemd/system/dflash-probe-$1.service && systemctl daemon-reload \
          && systemctl start dflash-probe-$1.service; echo \"[rc=\$?] $2\"; journalctl -q -o cat -u dflash-probe-$1.service"
  }
  echo "\$ a unit, DevicePolicy=closed, DeviceAllow= the nvidia nodes: nvidia-smi -L"
  probe allowed "(expected 0: the GPU listed)" "$allow"
  echo "\$ a unit, DevicePolicy=closed, no DeviceAllow: nvidia-smi -L"
  probe closed "(expected not 0: the device filter refuses the nodes)" ""
  IN=(bash "$SDNS" exec env SYSTEMD=1)
  return 0
}
for step in "$@"; do
  n=$((n + 1)) name=${step%%:*} arg=
  [[ $step == *:* ]] && arg=${step#*:}
  out=$OUT/$n-$name
  mkdir -p "$out"
  log "step $n: $step (results in $out)"
  case $name in
    kit) rc=0 ;;
    systemd) systemd_step > "$out/systemd.log" 2>&1; rc=$?; cat "$out/systemd.log" ;;
    validate) "${IN[@]}" python3 "$REPO/tests/gpu/validate.py" --venv "$VENV" --out "$out" --site "$KIT/site"; rc=$? ;;
    real) "${IN[@]}" env ${arg:+STEPS=$arg} CARRY="$KIT" OUT="$out" VENV="$VENV" bash "$REPO/tests/gpu/real_sglang.sh"; rc=$? ;;
    overlay) "${IN[@]}" env STEPS="${arg:-wheels,stage,refuse,deploy,serve}" SOURCE=overlay CARRY="$KIT" OUT="$out" VENV="$VENV" \
        bash "$REPO/tests/gpu/real_sglang.sh"; rc=$? ;;
    deploy) "${IN[@]}" env ${arg:+STEPS=$arg} CARRY="$KIT" OUT="$out" VENV="$VENV" bash "$REPO/tests/gpu/deploy.sh"; rc=$? ;;
  esac
  log "step $n: $step: rc=$rc"
  [ "$rc" = 0 ] || rc_all=$rc
done
if [ "${#IN[@]}" -gt 0 ]; then
  bash "$SDNS" exec journalctl --no-pager -o short-monotonic -n 400 > "$OUT/journal-tail.txt" 2>&1
  bash "$SDNS" stop
fi
exit "$rc_all"
