"""host_lock run as Ansible runs it (its own process, stdout a pipe like the SSH session's) on temporary
paths: it returns while its detached holder keeps the lock, a second run fails naming the holder, absent
frees the lock, check mode writes and starts nothing."""
from __future__ import annotations

import os
import re
import time

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.host import lock as HL
from lock_probe import locked, until
from module_runner import run_module

pytestmark = pytest.mark.skipif(not all(os.access(p, os.X_OK) for p in (HL.FLOCK, HL.TIMEOUT, HL.SH)),
                                reason="needs /usr/bin/flock, /usr/bin/timeout and /bin/sh")

WHO = "from ops@ctl (ansible-playbook pid 4242, play 'Deploy SGLang with DFlash speculative decoding')"


@pytest.fixture
def paths(tmp_path):
    args = {"lock_path": str(tmp_path / "dflash-deploy.lock"), "owner_path": str(tmp_path / "dflash-deploy.owner"),
            "token_prefix": str(tmp_path / "dflash-deploy.token-"), "host": "ct200"}
    yield args
    for token in tmp_path.glob("dflash-deploy.token-*"):
        token.unlink()
    until(lambda: not locked(tmp_path / "dflash-deploy.lock"))


def test_present_returns_while_its_holder_keeps_the_lock_and_absent_frees_it(paths, tmp_path):
    started = time.monotonic()
    rc, out = run_module("host_lock", dict(paths, token="20261201T101500-42", holder=WHO, wait=5), timeout=30)
    assert rc == 0, out
    assert time.monotonic() - started < 20           # the holder did not keep the module's stdout open
    assert out["changed"] is True and out["held"] is True
    assert out["holder"] == "20261201T101500-42 %s, holding it as pid %d on ct200" % (WHO, out["pid"])
    assert out["token_path"] == str(tmp_path / "dflash-deploy.token-20261201T101500-42")
    assert (tmp_path / "dflash-deploy.owner").read_text() == out["holder"] + "\n"
    assert locked(tmp_path / "dflash-deploy.lock")

    # the same token again: held already, nothing started
    rc, again = run_module("host_lock", dict(paths, token="20261201T101500-42", holder=WHO, wait=5))
    assert (rc, again["changed"], again["held"], again["pid"]) == (0, False, True, out["pid"])

    # a second run waits its wait, then fails naming the first, and leaves no token behind
    rc, second = run_module("host_lock", dict(paths, token="20261201T110000-7", holder=WHO, wait=1))
    assert rc == 1 and second["failed"] is True and second["held"] is False
    assert second["msg"] == (
        "another dflash.deploy run holds the host lock on ct200 (%s); wait for it to finish, or, if that run died, "
        "remove its token %s* on the host" % (out["holder"], paths["token_prefix"]))
    assert re.search(r"holds the host lock on ct200 \([0-9T]+-[0-9]+ from [a-z0-9_-]+@\S+ \(ansible-playbook pid "
                     r"[0-9]+, play '[^']+'\), holding it as pid [0-9]+ on ct200\)", second["msg"])
    assert not (tmp_path / "dflash-deploy.token-20261201T110000-7").exists()

    rc, released = run_module("host_lock", dict(paths, token="20261201T101500-42", state="absent"), diff=True)
    assert (rc, released["changed"], released["held"]) == (0, True, True)
    assert released["diff"] == {"before": "holder: %s\n" % out["holder"], "after": "holder: none\n"}
    assert not (tmp_path / "dflash-deploy.token-20261201T101500-42").exists()
    assert until(lambda: not locked(tmp_path / "dflash-deploy.lock"))
    rc, twice = run_module("host_lock", dict(paths, token="20261201T101500-42", state="absent"))
    assert (rc, twice["changed"]) == (0, False)


def test_check_mode_takes_and_drops_nothing(paths, tmp_path):
    rc, out = run_module("host_lock", dict(paths, token="t1", holder=WHO), check=True)
    assert (rc, out["changed"], out["held"], out["holder"]) == (0, True, False, "")
    assert list(tmp_path.iterdir()) == [] and not locked(tmp_path / "dflash-deploy.lock")
    (tmp_path / "dflash-deploy.token-t1").write_text("t1\n")
    rc, out = run_module("host_lock", dict(paths, token="t1", state="absent"), check=True)
    assert (rc, out["changed"]) == (0, True) and (tmp_path / "dflash-deploy.token-t1").exists()


@pytest.mark.parametrize("args, msg", [
    ({"token": "a b", "holder": WHO}, "host_lock: token 'a b': one word of letters"),
    ({"token": "t", "holder": WHO, "wait": 600, "max_age": 60}, "host_lock: max_age 60: the holder's lifetime"),
    ({"token": "t"}, "state is present but all of the following are missing: holder"),
])
def test_options_it_cannot_work_with_are_refused_before_anything_is_written(paths, tmp_path, args, msg):
    rc, out = run_module("host_lock", dict(paths, **args))
    assert rc == 1 and out["msg"].startswith(msg)
    assert list(tmp_path.iterdir()) == []


def test_the_defaults_are_the_run_paths():
    from ansible_collections.dflash.deploy.plugins.modules import host_lock
    assert (HL.LOCK, HL.OWNER, HL.TOKEN_PREFIX) == (
        "/run/dflash-deploy.lock", "/run/dflash-deploy.owner", "/run/dflash-deploy.token-")
    for name, value in (("lock_path", HL.LOCK), ("owner_path", HL.OWNER), ("token_prefix", HL.TOKEN_PREFIX)):
        assert 'default: %s\n' % value in host_lock.DOCUMENTATION
        assert '%s=dict(type="%s", default="%s"' % (name, "str" if name == "token_prefix" else "path", value) in (
            open(host_lock.__file__).read())
