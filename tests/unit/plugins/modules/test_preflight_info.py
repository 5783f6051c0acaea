"""preflight_info run as Ansible runs it (its own process, a child of this test): the answer's fields at the
top level, never changed, the same in check mode, a malformed request refused in one line."""
from __future__ import annotations

import os
import socket

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.host import preflight as PF
from module_runner import run_module


@pytest.fixture
def listening():
    """A TCP socket of this process listening on a free loopback port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def request_(tmp_path, listening):
    ok, bare = tmp_path / "Qwen3-8B", tmp_path / "missing"
    ok.mkdir()
    (ok / "config.json").write_text("{}")
    return {"base_dir": str(tmp_path / "opt"), "service_user": "no-such-user-here",
            "units": {"a": "sglang-dflash@a.service"}, "ports": {"a": listening},
            "pids": {"a": [os.getpid()]}, "models": {"a": [str(ok), str(bare)]}}


@pytest.mark.parametrize("check", [False, True])
def test_the_whole_answer(tmp_path, request_, check):
    rc, out = run_module("preflight_info", request_, check=check)
    assert rc == 0, out
    assert out["changed"] is False
    assert out["models"] == {"a": [str(tmp_path / "missing")]}
    me = os.getpid()
    assert out["pids"]["a"] == [{"pid": me, "comm": PF.comm_of(me), "unit": PF.unit_of(me)}]
    # the socket belongs to this test process, which the module (a child) can read
    assert [o["pid"] for o in out["ports"]["a"]] == [os.getpid()]
    assert out["disk"]["path"] == str(tmp_path)


def test_no_instances_reads_the_disk_only():
    rc, out = run_module("preflight_info", {})
    assert rc == 0, out
    assert (out["ports"], out["pids"], out["models"], out["disk"]["path"]) == ({}, {}, {}, "/")


def test_a_port_that_is_not_one_is_refused_in_one_line():
    rc, out = run_module("preflight_info", {"ports": {"a": "http"}})
    assert rc == 1 and out["failed"] is True and out["changed"] is False
    assert out["msg"] == "preflight_info: ports: instance a: 'http' is not a TCP port"


def test_the_host_s_own_uv_and_pip_configuration_is_listed_and_named():
    """Issue 44 item 4: the files this machine has among the uv and pip configuration the deploy's uv would ignore
    (UV_NO_CONFIG) are listed, and the message names each (empty when there is none)."""
    import pwd
    home = pwd.getpwnam("root").pw_dir
    candidates = ["/etc/uv/uv.toml", "/etc/xdg/uv/uv.toml", home + "/.config/uv/uv.toml", "/etc/pip.conf",
                  "/etc/xdg/pip/pip.conf", home + "/.config/pip/pip.conf", home + "/.pip/pip.conf"]
    rc, out = run_module("preflight_info", {})
    assert rc == 0, out
    assert [f["path"] for f in out["config_files"]] == [p for p in candidates if os.path.exists(p)]
    assert all(f["kind"] == ("uv" if f["path"].endswith("uv.toml") else "pip") for f in out["config_files"])
    assert (out["config_message"] == "") == (out["config_files"] == [])
    assert all(f["path"] in out["config_message"] for f in out["config_files"])
