#!/usr/bin/env bash
# Can the GPU machine run systemd as PID 1 of its own PID namespace?
# Run on the GPU machine as root; prints each fact and each attempt with its
# output, so docs/validation.md can record exactly what failed or worked.
# Usage: bash tests/gpu/systemd_probe.sh [SYSTEMD_ROOT]
#   SYSTEMD_ROOT: a directory where systemd's Debian packages were unpacked
#                 (dpkg -x), used when the image has no systemd of its own.
set -u
root=${1:-}
step() { printf '\n== %s\n' "$*"; }
try() { printf '$ %s\n' "$*"; timeout 30 "$@" 2>&1 | head -40; printf '[rc=%s]\n' "${PIPESTATUS[0]}"; }

step "the machine"
try cat /etc/os-release
try uname -r
try id
try cat /proc/1/comm
try ldd --version
step "capabilities and security"
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp)' /proc/self/status
try cat /proc/self/attr/current
step "cgroups"
try stat -fc %T /sys/fs/cgroup
try cat /proc/self/cgroup
try cat /sys/fs/cgroup/cgroup.controllers
try cat /sys/fs/cgroup/cgroup.subtree_control
try findmnt -n -o TARGET,FSTYPE,OPTIONS /sys/fs/cgroup
try mkdir /sys/fs/cgroup/dflash-probe
try rmdir /sys/fs/cgroup/dflash-probe
step "GPU device nodes"
try ls -l /dev/nvidia*
try nvidia-smi -L
step "systemd in the image"
for p in /lib/systemd/systemd /usr/lib/systemd/systemd /sbin/init; do ls -l "$p" 2>&1; done
try dpkg -l systemd
sd=/lib/systemd/systemd
if [ ! -x "$sd" ] && [ -n "$root" ]; then sd="$root/lib/systemd/systemd"; fi
step "namespaces"
try unshare --pid --fork --mount-proc true
try unshare --pid --fork --mount-proc --cgroup true
try unshare --mount true
try mount -t tmpfs none /mnt
umount /mnt 2>/dev/null
if [ -x "$sd" ]; then
  step "systemd as PID 1 of a new PID namespace ($sd)"
  try "$sd" --version
  log=/tmp/systemd-probe.log
  # systemd refuses to be PID 1 outside a container unless it finds one; say it is one.
  unshare --pid --fork --mount-proc --cgroup env container=dflash-probe "$sd" \
      --system --log-target=console --log-level=info >"$log" 2>&1 &
  pid=$!
  sleep 15
  echo "--- systemd's log (first 60 lines)"; head -60 "$log"
  child=$(pgrep -P "$pid" -f systemd | head -1)
  echo "systemd host pid: ${child:-none}"
  if [ -n "${child:-}" ]; then
    try nsenter -t "$child" -p -m systemctl is-system-running
    try nsenter -t "$child" -p -m systemctl --failed --no-pager
    try nsenter -t "$child" -p -m systemd-run --wait -p DeviceAllow=/dev/nvidiactl -p DevicePolicy=closed ls -l /dev/nvidiactl
    kill "$child" 2>/dev/null
  fi
  sleep 2; kill "$pid" 2>/dev/null
else
  step "no systemd binary: nothing to boot"
fi
