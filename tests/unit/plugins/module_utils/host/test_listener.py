# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host/listener.py: who holds a loopback port, and whether it is the instance, before a probe sends
the API key there (round 3, N7). The /proc/net parser on sample lines (IPv4 and IPv6), the address
and control-group rules, a fake /proc for the unit's processes, and real listeners on 127.0.0.1: one
started as another user (uid 65534), which is refused and named, and whose recorded requests show
that nothing reached it (nor the Authorization header); one of the expected user, which passes."""
from __future__ import annotations

import contextlib
import os
import pwd
import subprocess
import sys
import time
import urllib.request

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.converged import observe
from ansible_collections.dflash.deploy.plugins.module_utils.host import listener as L
from ansible_collections.dflash.deploy.plugins.module_utils.host import readiness as R
from module_runner import run_module

UNIT = "sglang-dflash@qwen3-8b.service"
CGROUP = "/system.slice/system-sglang\\x2ddflash.slice/" + UNIT
ME = pwd.getpwuid(os.getuid()).pw_name

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 49 1 0000000078606a03 100
   1: 0100007F:7531 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 5150 1 0000000000 100
   2: 0100007F:95C7 0100007F:D0DA 06 00000000:00000000 03:00000A5C 00000000     0        0 0 3 000000001a009cf7
   3: 0140590A:7531 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 777 1 0000000000 100
"""
Z = "0" * 32
TAIL = " 00000000:00000000 00:00000000 00000000"
TCP6 = "\n".join([
    "  sl  local_address                         remote_address                        st tx_queue rx_queue tr",
    "   0: %s:7531 %s:0000 0A%s   999        0 8001 1 0 100" % (Z, Z, TAIL),
    "   1: %s:7531 %s:0000 0A%s  1001        0 8002 1 0 100" % ("0" * 24 + "01000000", Z, TAIL),
    "   2: %s:7532 %s:0000 0A%s  1001        0 8003 1 0 100" % ("0" * 16 + "FFFF00000100007F", Z, TAIL),
    "   3: %s:7533 %s:9999 01%s  1001        0 8004 1 0 100" % ("0" * 16 + "FFFF00000100007F", Z, TAIL), ""])


def test_proc_net_tcp_lines_are_read_as_listen_sockets():
    assert L.parse_proc_net(TCP, "little") == [
        L.Socket("0.0.0.0", 2024, 0, 49), L.Socket("127.0.0.1", 30001, 1001, 5150),
        L.Socket("10.89.64.1", 30001, 999, 777)]  # the established connection (06) is no listener
    assert L.parse_proc_net(TCP6, "little") == [
        L.Socket("::", 30001, 999, 8001), L.Socket("::1", 30001, 1001, 8002),
        L.Socket("::ffff:7f00:1", 30002, 1001, 8003)]  # state 01 (established) skipped
    assert L.parse_proc_net("header\n  0: garbage\n   1: ZZ:1 0:0 0A a b c 0 0 x 1\n") == []


@pytest.mark.parametrize(("local", "target", "covered"), [
    ("0.0.0.0", "127.0.0.1", True), ("::", "127.0.0.1", True), ("127.0.0.1", "127.0.0.1", True),
    ("::ffff:127.0.0.1", "127.0.0.1", True), ("10.89.64.201", "127.0.0.1", False), ("::1", "127.0.0.1", False),
    ("0.0.0.0", "::1", False), ("::", "::1", True), ("127.0.0.2", "127.0.0.1", False)])
def test_which_listening_addresses_cover_the_probe(local, target, covered):
    assert L.covers(local, target) is covered


def test_the_unit_is_its_control_group_not_a_path_ending_in_its_name():
    assert L.in_control_group("0::" + CGROUP + "\n", CGROUP)
    assert L.in_control_group("1:name=systemd:" + CGROUP + "/payload\n0::/other\n", CGROUP)
    # a user names the cgroups of their own user@.service subtree: a name alone proves nothing
    assert not L.in_control_group("0::/user.slice/user-1001.slice/user@1001.service/" + UNIT + "\n", CGROUP)
    assert not L.in_control_group("0::" + CGROUP + "-other\n", CGROUP)
    assert not L.in_control_group("4:memory:" + CGROUP + "\n", CGROUP)  # a v1 controller's path: not systemd's
    assert not L.in_control_group("0::" + CGROUP + "\n", "")  # the unit has no control group: nothing is its


def fake_proc(tmp_path, cgroup, uid=1001, comm="python3"):
    """A /proc with one listener on 127.0.0.1:30001 (inode 5150) held by pid 4242."""
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(TCP)
    (proc / "net" / "tcp6").write_text(TCP6.splitlines()[0] + "\n")
    (proc / "4242" / "fd").mkdir(parents=True)
    os.symlink("socket:[5150]", proc / "4242" / "fd" / "7")
    os.symlink("/dev/null", proc / "4242" / "fd" / "0")
    (proc / "4242" / "status").write_text("Name:\t%s\nUid:\t%d\t%d\t%d\t%d\n" % (comm, uid, uid, uid, uid))
    (proc / "4242" / "comm").write_text(comm + "\n")
    (proc / "4242" / "cgroup").write_text("0::%s\n" % cgroup)
    (proc / "self").mkdir()
    return str(proc)


def test_a_listener_in_the_units_control_group_passes_one_outside_is_named(tmp_path):
    proc = fake_proc(tmp_path, CGROUP)
    assert L.check("127.0.0.1", 30001, UNIT, proc=proc, control_group=CGROUP) == (True, None)
    assert L.check("127.0.0.1", 30002, UNIT, proc=proc, control_group=CGROUP) == (False, None)  # nobody listens
    spoof = fake_proc(tmp_path / "b", "/user.slice/user-1001.slice/user@1001.service/" + UNIT)
    user = L.user_name(1001)
    assert L.check("127.0.0.1", 30001, UNIT, proc=spoof, control_group=CGROUP) == (True, (
        "port 30001 on 127.0.0.1 is held by pid 4242 (uid 1001 %s, python3), not by %s: the key was not sent"
        % (user, UNIT)))
    with pytest.raises(L.ForeignListener, match="held by pid 4242"):
        L.require("127.0.0.1", 30001, UNIT, key="", proc=spoof, control_group=CGROUP)


def test_a_socket_no_process_is_found_for_is_the_instances_only_by_the_units_uid(tmp_path):
    """Without CAP_SYS_PTRACE (containers) root cannot read another user's /proc/<pid>/fd: the socket's
    uid is then compared with the uids of the unit's processes (their status and cgroup are readable)."""
    proc = fake_proc(tmp_path, CGROUP)
    os.unlink(os.path.join(proc, "4242", "fd", "7"))  # hidden from root
    assert L.check("127.0.0.1", 30001, UNIT, proc=proc, control_group=CGROUP) == (True, None)
    # the unit's process runs as another uid than the socket's (1001, mallory's): someone else's
    (tmp_path / "proc" / "4242" / "status").write_text("Name:\tpython3\nUid:\t999\t999\t999\t999\n")
    listening, error = L.check("127.0.0.1", 30001, UNIT, proc=proc, control_group=CGROUP)
    assert listening and "held by a socket of uid 1001" in error and "no process could be found for" in error
    # no process in the unit at all (it stopped): nothing vouches for the socket
    (tmp_path / "proc" / "4242" / "cgroup").write_text("0::/user.slice\n")
    (tmp_path / "proc" / "4242" / "status").write_text("Name:\tpython3\nUid:\t1001\t1001\t1001\t1001\n")
    assert "no process could be found for" in L.check("127.0.0.1", 30001, UNIT, proc=proc, control_group=CGROUP)[1]


def test_a_probe_host_must_be_an_address():
    assert L.target_of("http://127.0.0.1:30001") == ("127.0.0.1", 30001)
    assert L.target_of("http://localhost:30001/") == ("127.0.0.1", 30001)
    assert L.target_of("http://[::1]:30001") == ("::1", 30001)
    with pytest.raises(ValueError, match="not a host name"):
        L.target_of("http://gpu-host.example:30001")


# -- real listeners on loopback -------------------------------------------------------------------

RECORDER = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print("REQUEST", self.path, "AUTH=%s" % self.headers.get("Authorization"), flush=True)
        body = b'{"data": [{"id": "m"}]}'
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print("PORT", s.server_port, flush=True)
s.serve_forever()
"""


def _interpreter_for(uid):
    """An interpreter the user ``uid`` may run (this one may sit under root's 0700 home)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        try:
            if subprocess.run([candidate, "-c", "pass"], preexec_fn=lambda: os.setuid(uid), check=False,
                              capture_output=True, timeout=30).returncode == 0:
                return candidate
        except OSError:
            continue
    pytest.skip("no interpreter that uid %d may run" % uid)


@contextlib.contextmanager
def recorder(uid=None):
    """A loopback HTTP server (as ``uid`` when given) that prints each request and its Authorization
    header; yields (port, pid, requests()) where requests() is what it recorded so far."""
    python = _interpreter_for(uid) if uid is not None else sys.executable
    proc = subprocess.Popen([python, "-c", RECORDER], stdout=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"},
                            preexec_fn=(lambda: os.setuid(uid)) if uid is not None else None)
    lines = []
    try:
        port = int(proc.stdout.readline().split()[1])
        yield port, proc.pid, lambda: lines
    finally:
        proc.terminate()
        lines.extend(proc.stdout.read().splitlines())
        proc.wait(timeout=10)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="starting a listener as another user needs root")


@needs_root
def test_a_port_held_by_another_user_gets_neither_request_nor_key(tmp_path):
    """Round 3, N7: another user's listener on 127.0.0.1:<port>. The check names the process, its
    user and command; readiness' guarded probe, the fast path's health and the performance probe's
    send raise or answer without a request; the server recorded none, and no Authorization header."""
    env_file = tmp_path / "q.env"
    env_file.write_text("SGLANG_API_KEY=RT3-KEY-NEVER-SENT\n")
    with recorder(uid=65534) as (port, pid, requests):
        base = "http://127.0.0.1:%d" % port
        listening, error = L.check("127.0.0.1", port, UNIT, control_group=CGROUP)
        assert listening and error.startswith("port %d on 127.0.0.1 is held by pid %d (uid 65534 %s, python"
                                              % (port, pid, L.user_name(65534)))
        assert error.endswith("not by %s: the key was not sent" % UNIT)
        guarded = L.guard(R.get, base, UNIT, user=ME)
        with pytest.raises(L.ForeignListener, match="held by pid %d" % pid):
            guarded(base + "/health_generate", "RT3-KEY-NEVER-SENT")
        with pytest.raises(L.ForeignListener):
            R.wait_ready(base, "m", UNIT, 5, 0.1, env_file=str(env_file), probe=guarded, read_unit=lambda u: {})
        reason = observe.health(base, "m", str(env_file), 5, unit=UNIT)
        assert reason.startswith("port %d on 127.0.0.1 is held by pid %d" % (port, pid)), reason
        assert L.holder_text(base, UNIT).startswith("port %d on 127.0.0.1 is held by pid %d" % (port, pid))
        assert requests() == []
        # the recorder records: a request sent without the guard arrives (so the assertion above can fail)
        urllib.request.urlopen(base + "/control", timeout=5).read()
        time.sleep(0.2)
    assert requests() == ["REQUEST /control AUTH=None"]
    assert not any("RT3-KEY" in line for line in requests())


@needs_root
def test_readiness_and_the_performance_probe_fail_naming_the_holder(tmp_path):
    """The modules as Ansible runs them: instance_ready stops at once (no wait to its timeout) and
    perf_probe measures nothing; each names the holder; the recorder saw no request."""
    env_file = tmp_path / "q.env"
    env_file.write_text("SGLANG_API_KEY=RT3-KEY-NEVER-SENT\n")
    with recorder(uid=65534) as (port, pid, requests):
        rc, ready = run_module("instance_ready", {"base": "http://127.0.0.1:%d" % port, "model": "m", "unit": UNIT,
                                                  "timeout": 60, "interval": 1, "env_file": str(env_file)})
        rc2, perf = run_module("perf_probe", {"port": port, "unit": UNIT, "env_file": str(env_file),
                                              "max_tokens": 2, "timeout": 5})
    held = "port %d on 127.0.0.1 is held by pid %d (uid 65534 %s, python" % (port, pid, L.user_name(65534))
    assert rc == 1 and ready["ready"] is False and ready["msg"].startswith(held), ready
    assert ready["msg"].endswith("not by %s: the key was not sent" % UNIT) and ready["seconds"] < 30
    assert rc2 == 1 and perf["msg"].startswith("the performance probe did not measure http://127.0.0.1:%d: %s"
                                               % (port, held)), perf
    assert requests() == []


@needs_root
def test_a_failed_start_names_who_holds_the_port(tmp_path, monkeypatch):
    """Round 3, row 33: someone took the port during the restart, the server died of Errno 98 and the unit
    failed before any probe; readiness' reason names the holder (the diagnosis quotes it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text('#!/bin/sh\ncase "$*" in *ControlGroup*) echo "%s"; exit 0;; esac\n'
                                       'printf "NRestarts=0\\nActiveState=failed\\nSubState=failed\\n"\n' % CGROUP)
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    with recorder(uid=65534) as (port, pid, requests):
        rc, ready = run_module("instance_ready", {"base": "http://127.0.0.1:%d" % port, "model": "m", "unit": UNIT,
                                                  "timeout": 60, "interval": 1})
    assert rc == 1 and ready["ready"] is False, ready
    assert ready["msg"].startswith("the unit failed; port %d on 127.0.0.1 is held by pid %d (uid 65534" % (port, pid))
    assert ready["msg"].endswith("not by %s" % UNIT) and requests() == []


@needs_root
def test_a_listener_of_the_expected_user_is_probed_with_the_key(tmp_path):
    env_file = tmp_path / "q.env"
    env_file.write_text("SGLANG_API_KEY=RT3-KEY-OURS\n")
    with recorder() as (port, _pid, requests):
        base = "http://127.0.0.1:%d" % port
        assert L.check("127.0.0.1", port, user=ME) == (True, None)
        assert observe.health(base, "m", str(env_file), 5, unit=UNIT, user=ME) is None
        # the unit alone: this process is in no unit's control group, so the same listener is refused
        assert "the key was not sent" in observe.health(base, "m", str(env_file), 5, unit=UNIT)
    assert requests() == ["REQUEST /health_generate AUTH=Bearer RT3-KEY-OURS",
                          "REQUEST /v1/models AUTH=Bearer RT3-KEY-OURS"]
    assert observe.health(base, "m", str(env_file), 5, unit=UNIT, user=ME) == (
        "/health_generate answered nothing: nothing listens on 127.0.0.1:%d" % port)
