"""host/preflight.py (preflight_info's logic): who holds a port or a GPU process (pid, comm, systemd unit),
free disk and model directories, read from this machine's own /proc with real sockets and processes."""
from __future__ import annotations

import os
import socket

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.host import preflight as mod


@pytest.fixture
def listening():
    """A TCP socket of this process listening on a free loopback port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_listening_socket_is_found_with_its_uid_and_a_free_port_has_none(listening):
    socks = mod.listeners(listening)
    assert list(socks.values()) == [os.getuid()]
    assert mod.listeners(free_port()) == {}


def test_the_port_s_owner_is_this_process_by_pid_and_comm(listening):
    owners = mod.port_owners(listening)
    assert [(o["pid"], o["comm"]) for o in owners] == [(os.getpid(), mod.comm_of(os.getpid()))]
    assert mod.port_owners(free_port()) == []


def test_a_socket_whose_process_cannot_be_read_is_the_service_s_only_by_uid_and_active_unit(monkeypatch):
    # another user's /proc/<pid>/fd is unreadable without CAP_SYS_PTRACE (containers): only the socket is seen
    monkeypatch.setattr(mod, "listeners", lambda port: {"999999999": 4242})
    monkeypatch.setattr(mod, "unit_active", lambda unit: unit == "sglang-dflash@a.service")
    inferred = mod.port_owners(30001, "sglang-dflash@a.service", 4242)
    assert inferred == [{"pid": None, "comm": "a process of uid 4242 (not readable here)",
                         "unit": "sglang-dflash@a.service", "uid": 4242, "inferred": "uid"}]
    # another uid, or the unit not active: a foreign holder, named by its uid
    assert mod.port_owners(30001, "sglang-dflash@a.service", 1000)[0]["unit"] is None
    assert mod.port_owners(30001, "sglang-dflash@b.service", 4242)[0]["unit"] is None


@pytest.mark.parametrize("cgroup, unit", [
    ("0::/system.slice/sglang-dflash@qwen3-8b.service\n", "sglang-dflash@qwen3-8b.service"),
    ("12:pids:/system.slice/ddtree-stopgap.service/payload\n0::/\n", "ddtree-stopgap.service"),
    ("0::/user.slice/user-0.slice/session-3.scope\n", None),
])
def test_the_unit_comes_from_the_process_s_cgroup(monkeypatch, tmp_path, cgroup, unit):
    fake = tmp_path / "cgroup"
    fake.write_text(cgroup)
    real_open = open

    def fake_open(path, *a, **k):
        return real_open(fake if path == "/proc/7/cgroup" else path, *a, **k)
    monkeypatch.setattr(mod, "open", fake_open, raising=False)
    assert mod.unit_of(7) == unit


def test_a_process_that_is_gone_has_no_unit_and_no_comm():
    assert mod.unit_of(2 ** 22 + 1) is None and mod.comm_of(2 ** 22 + 1) is None
    assert mod.unit_of("not a pid") is None


def test_free_space_of_a_path_not_made_yet_is_its_nearest_existing_parent_s(tmp_path):
    out = mod.free_space(str(tmp_path / "opt" / "dflash"))
    assert out["path"] == str(tmp_path) and out["free_gb"] >= 0


def test_the_whole_answer(tmp_path, listening):
    ok, bare = tmp_path / "Qwen3-8B", tmp_path / "missing"
    ok.mkdir()
    (ok / "config.json").write_text("{}")
    request = {"base_dir": str(tmp_path / "opt"), "service_user": "no-such-user-here",
               "units": {"a": "sglang-dflash@a.service"}, "ports": {"a": listening},
               "pids": {"a": [os.getpid()]}, "models": {"a": [str(ok), str(bare)]}}
    out = mod.answer(**request)
    assert out["models"] == {"a": [str(bare)]}
    me = os.getpid()
    assert out["pids"]["a"] == [{"pid": me, "comm": mod.comm_of(me), "unit": mod.unit_of(me)}]
    # the socket belongs to this process (tests/unit/plugins/modules/test_preflight_info.py reads it from a child)
    assert [o["pid"] for o in out["ports"]["a"]] == [os.getpid()]
    assert out["disk"]["path"] == str(tmp_path)


def test_an_empty_request_reads_only_the_disk():
    assert mod.answer() == {"ports": {}, "pids": {}, "models": {}, "disk": mod.free_space("/")}


def test_the_service_user_s_uid_or_none_when_there_is_no_such_user():
    assert mod.service_uid_of("root") == 0
    assert mod.service_uid_of("no-such-user-here") is None and mod.service_uid_of(None) is None


@pytest.mark.parametrize("field, value, line", [
    ("ports", {"a": "http"}, "ports: instance a: 'http' is not a TCP port"),
    ("ports", {"a": 70000}, "ports: instance a: 70000 is not a TCP port"),
    ("ports", {"a": None}, "ports: instance a: None is not a TCP port"),
    ("ports", {"a": True}, "ports: instance a: True is not a TCP port"),
    ("pids", {"a": 4242}, "pids: instance a: 4242 is not a list of pids"),
    ("pids", {"a": [4242, "-1"]}, "pids: instance a: '-1' is not a pid"),
    ("models", {"a": "/srv/models/Qwen3-8B"},
     "models: instance a: '/srv/models/Qwen3-8B' is not a list of directories"),
])
def test_a_malformed_request_is_refused_in_one_line_before_anything_is_read(monkeypatch, field, value, line):
    monkeypatch.setattr(mod, "free_space", lambda path: pytest.fail("read before the request was checked"))
    with pytest.raises(mod.PreflightRequestError) as err:
        mod.answer(**{field: value})
    assert str(err.value) == line


def test_a_port_given_as_digits_is_read_as_a_number(listening):
    assert [o["pid"] for o in mod.answer(ports={"a": str(listening)})["ports"]["a"]] == [os.getpid()]


def test_a_unit_is_active_only_when_systemctl_says_so_in_time(monkeypatch):
    seen = []

    def answer(rc, timed_out=False):
        def run(argv, timeout):
            seen.append((argv, timeout))
            return rc, "", "", timed_out
        return run

    monkeypatch.setattr(mod, "run_with_timeout", answer(0))
    assert mod.unit_active("sglang-dflash@a.service") is True
    assert seen == [([mod.SYSTEMCTL, "is-active", "--quiet", "sglang-dflash@a.service"], mod.SYSTEMCTL_TIMEOUT)]
    for rc, timed_out in ((3, False), (None, False), (-9, True)):  # inactive, no systemctl, no answer in time
        monkeypatch.setattr(mod, "run_with_timeout", answer(rc, timed_out))
        assert mod.unit_active("sglang-dflash@a.service") is False
