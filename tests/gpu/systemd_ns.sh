#!/usr/bin/env bash
# systemd as PID 1 of its own namespaces on the GPU machine, which has no systemd (issue 45 item 2).
#
#   tests/gpu/systemd_ns.sh install DEBDIR   # systemd 252's Debian packages (make gpu-systemd-debs):
#                                            # each unpacked, only files the image lacks copied in
#   tests/gpu/systemd_ns.sh boot             # PID, mount and cgroup namespaces, a cgroup of its own
#   tests/gpu/systemd_ns.sh exec CMD...      # CMD inside systemd's namespaces (systemctl, ansible-playbook)
#   tests/gpu/systemd_ns.sh stop
#
# How it boots: a cgroup /sys/fs/cgroup/dflash-sd-<time> is made; a new PID and mount namespace's
# first process is moved into its sd/ (unshare itself waits in outer/), enters a new cgroup namespace
# (so that sd/ is systemd's root and holds no other process), mounts cgroup2, /run and /run/lock afresh, and execs systemd with
# container=dflash-gpu (systemd as PID 1 outside a container runtime needs to be told). The host-side
# PID of systemd is kept in /tmp/dflash-sd.pid; `exec` is nsenter into all its namespaces.
set -uo pipefail
PIDFILE=/tmp/dflash-sd.pid
LOG=/tmp/dflash-sd.log
sdpid() { cat "$PIDFILE" 2>/dev/null; }

case ${1:-} in
  install)
    debs=${2:?usage: systemd_ns.sh install DEBDIR}
    root=/tmp/dflash-sd-root
    rm -rf "$root" && mkdir -p "$root"
    for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$root" || exit 3; done
    # merged /usr on the image: the packages' /lib, /bin, /sbin go under /usr; -n keeps every file the
    # image has (its own libssl, libc, ...), so only what is missing is added
    for d in lib bin sbin; do
      [ -d "$root/$d" ] || continue
      if [ -L "/$d" ]; then cp -an "$root/$d/." "/usr/$d/"; else cp -an "$root/$d/." "/$d/"; fi
    done
    for d in usr etc var; do [ -d "$root/$d" ] && cp -an "$root/$d/." "/$d/"; done
    ldconfig
    # units that need what a GPU machine's container lacks (udev, dbus, a console)
    for u in systemd-logind.service getty@tty1.service console-getty.service systemd-udevd.service \
             systemd-networkd.service systemd-resolved.service systemd-timesyncd.service \
             systemd-firstboot.service systemd-remount-fs.service; do
      ln -sfn /dev/null "/etc/systemd/system/$u"
    done
    # tmpfiles.d/tmp.conf's "D /tmp" empties /tmp at boot, and /tmp is all a GPU call keeps (the kit,
    # this script's own files): an empty file of the same name in /etc overrides it
    mkdir -p /etc/tmpfiles.d && : > /etc/tmpfiles.d/tmp.conf
    systemd-machine-id-setup >/dev/null 2>&1 || true
    /lib/systemd/systemd --version | head -1
    ;;
  boot)
    [ -x /lib/systemd/systemd ] || { echo "systemd_ns.sh: no /lib/systemd/systemd: run install first" >&2; exit 3; }
    # a fresh cgroup per boot: sd/ is systemd's root (its cgroup namespace), outer/ holds unshare itself,
    # so systemd's root holds no other process
    cg=/sys/fs/cgroup/dflash-sd-$(date +%s)
    mkdir -p "$cg/outer" "$cg/sd" && echo "$cg" > /tmp/dflash-sd.cgroup
    : > "$LOG"
    # shellcheck disable=SC2016
    ( echo "$BASHPID" > "$cg/outer/cgroup.procs"
      exec setsid unshare --pid --fork --mount --mount-proc --propagation private sh -c '
      until grep -q "/sd\$" /proc/self/cgroup; do sleep 0.05; done
      exec unshare --cgroup sh -c "
        umount -l /sys/fs/cgroup; mount -t cgroup2 cgroup2 /sys/fs/cgroup || exit 5
        mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -p /run/lock || exit 6
        [ -e /dev/console ] || touch /dev/console; mount --bind '"$LOG"' /dev/console || exit 7
        exec env -i container=dflash-gpu PATH=/usr/sbin:/usr/bin:/sbin:/bin /lib/systemd/systemd \
          --system --log-target=console --log-level=info"' ) > "$LOG" 2>&1 < /dev/null &
    outer=$!
    for _ in $(seq 1 100); do
      pid=$(pgrep -P "$outer" | head -1)  # unshare's child: PID 1 of the new namespace
      [ -n "$pid" ] && [ "$(readlink "/proc/$pid/ns/pid")" != "$(readlink /proc/self/ns/pid)" ] && break
      pid=
      sleep 0.1
    done
    [ -n "${pid:-}" ] || { echo "systemd_ns.sh: no PID 1 appeared"; cat "$LOG"; exit 4; }
    echo "$pid" > "$cg/sd/cgroup.procs" || exit 4
    echo "$pid" > "$PIDFILE"
    for _ in $(seq 1 300); do  # the manager answers once its private socket exists
      nsenter -t "$pid" -a test -S /run/systemd/private 2>/dev/null && break
      kill -0 "$pid" 2>/dev/null || { echo "systemd_ns.sh: PID 1 exited"; cat "$LOG"; exit 4; }
      sleep 0.1
    done
    if ! timeout 90 nsenter -t "$pid" -a systemctl is-system-running --wait; then
      echo "--- systemd's log"; tail -60 "$LOG"
      nsenter -t "$pid" -a systemctl --failed --no-pager
    fi
    echo "systemd: host pid $pid, $(nsenter -t "$pid" -a systemctl --version | head -1)"
    ;;
  exec)
    shift
    pid=$(sdpid); [ -n "$pid" ] || { echo "systemd_ns.sh: not booted" >&2; exit 3; }
    # entering a mount namespace moves the cwd to its root: back to where the caller was (the same files)
    exec nsenter -t "$pid" -a sh -c 'cd "$1" && shift && exec "$@"' sh "$PWD" "$@"
    ;;
  stop)
    pid=$(sdpid); [ -n "$pid" ] && kill -s SIGRTMIN+4 "$pid" 2>/dev/null  # poweroff
    sleep 3; [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -f "$PIDFILE"
    ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
