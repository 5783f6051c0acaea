"""bundle_push run as Ansible runs it: the module in its own process on a real tar (its first call reads only
dest; its second checks the received file and renames it into place), and the action with ansible-playbook
against localhost (local connection): one push, then nothing transferred, check mode transferring nothing,
a wrong manifest_sha256 refused with dest untouched, and Ansible's remote tmp dir removed each time."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from bundle_tar import make_bundle, manifest_bytes
from module_runner import run_module
from role_collection import role_collection

REPO = Path(__file__).resolve().parents[4]


def test_first_call_reads_dest_only_and_says_whether_it_would_change(tmp_path):
    dest = tmp_path / "b.tar"
    digest = make_bundle(tmp_path / "src.tar")
    args = {"src": str(tmp_path / "not-there"), "dest": str(dest), "manifest_sha256": digest}
    rc, out = run_module("bundle_push", args, diff=True)
    assert (rc, out["changed"], out["transferred"], out["before_manifest_sha256"]) == (0, True, False, None)
    assert out["diff"] == {"before": "manifest_sha256: none\n", "after": "manifest_sha256: %s\n" % digest}
    assert not dest.exists()

    os.link(tmp_path / "src.tar", dest)
    dest.chmod(0o600)
    rc, out = run_module("bundle_push", args, check=True)       # same bundle, mode differs: check says so
    assert (rc, out["changed"], out["transferred"]) == (0, True, False)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    rc, out = run_module("bundle_push", args)
    assert (rc, out["changed"], out["before_manifest_sha256"]) == (0, True, digest)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    rc, out = run_module("bundle_push", args)
    assert (rc, out["changed"], out["transferred"]) == (0, False, False)


def test_second_call_checks_the_received_file_and_renames_it_into_place(tmp_path):
    (tmp_path / "tmp").mkdir()
    received = tmp_path / "tmp" / "bundle.part"
    digest = make_bundle(received)
    data = received.read_bytes()
    dest = tmp_path / "b.tar"
    old = make_bundle(dest, manifest=manifest_bytes(old=True))
    args = {"src": str(received), "dest": str(dest), "manifest_sha256": digest, "size": len(data),
            "owner": "root", "group": "root", "mode": "0640"}
    if os.geteuid() != 0:
        args.pop("owner"), args.pop("group")

    rc, out = run_module("bundle_push", args, check=True)
    assert (rc, out["changed"]) == (0, True) and received.exists() and dest.read_bytes() != data

    rc, out = run_module("bundle_push", args, diff=True)
    assert rc == 0, out
    assert (out["changed"], out["transferred"], out["placed"], out["size"]) == (True, True, "rename", len(data))
    assert out["before_manifest_sha256"] == old and out["manifest_sha256"] == digest
    assert out["diff"]["before"] == "manifest_sha256: %s\n" % old
    assert dest.read_bytes() == data and not received.exists()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640


@pytest.mark.parametrize("what", ["size", "manifest"])
def test_a_received_file_that_is_not_the_bundle_is_refused_and_dest_left_as_it_was(tmp_path, what):
    received = tmp_path / "bundle.part"
    digest = make_bundle(received)
    dest = tmp_path / "b.tar"
    dest.write_bytes(b"the host's old bundle")
    size = received.stat().st_size
    args = {"src": str(received), "dest": str(dest), "size": size + (1 if what == "size" else 0),
            "manifest_sha256": digest if what == "size" else "f" * 64}
    rc, out = run_module("bundle_push", args)
    assert rc == 1 and out["failed"] is True and out["changed"] is False
    assert "\n" not in out["msg"] and out["msg"].endswith("; %s left as it was" % dest)
    if what == "size":
        assert out["msg"].startswith("bundle_push: the received file is %d bytes, the controller's %d"
                                     % (size, size + 1))
    else:
        assert out["msg"].startswith("bundle_push: the received bundle's MANIFEST.json has sha256 %s, not the "
                                     "manifest_sha256 %s the task names" % (digest, "f" * 64))
    assert dest.read_bytes() == b"the host's old bundle"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar", "bundle.part"]


@pytest.mark.parametrize("args, msg", [
    ({"manifest_sha256": "ABC"}, "bundle_push: manifest_sha256 'ABC' is not 64 lowercase hex digits"),
    ({"mode": "u=rw"}, "bundle_push: mode 'u=rw' is not an octal mode such as '0644'"),
    ({"owner": "no-such-user-x"}, "bundle_push: owner no-such-user-x: no such user on the host"),
])
def test_options_it_cannot_work_with_are_refused(tmp_path, args, msg):
    base = {"src": str(tmp_path / "s"), "dest": str(tmp_path / "d"), "manifest_sha256": "0" * 64}
    rc, out = run_module("bundle_push", dict(base, **args))
    assert (rc, out["msg"]) == (1, msg)
    assert list(tmp_path.iterdir()) == []


# --- the action, with ansible-playbook against localhost ---------------------------------------------

@pytest.fixture(scope="module")
def playbook(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle-push")
    role_collection(root, ())
    (root / "remote-tmp").mkdir()
    (root / "host").mkdir()
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_DEPRECATION_WARNINGS="false",
               ANSIBLE_LOCAL_TEMP=str(root / "local-tmp"))
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "ansible_remote_tmp": str(root / "remote-tmp")}}}}))

    def play(tasks: list[dict], *flags: str) -> dict:
        (root / "play.yml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
        proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(root / "hosts.yml"),
                               str(root / "play.yml"), *flags], cwd=root, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        out = json.loads(proc.stdout[proc.stdout.index("{"):])
        # nothing left in the remote tmp: the action removes its dir, and so would Ansible's end-of-task cleanup,
        # so this holds the run to what a user sees, not the action's own removal
        assert os.listdir(root / "remote-tmp") == []
        return {t["task"]["name"]: t["hosts"]["h1"] for p in out["plays"] for t in p["tasks"]}

    return root, play


def push(name: str, src: Path, dest: Path, digest: str, **kw) -> dict:
    return {"name": name, "dflash.deploy.bundle_push": dict(src=str(src), dest=str(dest), manifest_sha256=digest,
                                                            mode="0640", **kw), "ignore_errors": True}


@pytest.mark.parametrize("transfer, way, placed", [
    # a local connection: the module copies the controller's file beside dest, once, and leaves it
    ("auto", "local_copy", "copy"),
    # the connection's own copy into the remote tmp, then one rename (the same filesystem here)
    ("put_file", "put_file", "rename"),
])
def test_the_action_pushes_once_then_transfers_nothing(playbook, transfer, way, placed):
    root, play = playbook
    bundle = root / f"cuda-cu130-{transfer}.tar"
    digest = make_bundle(bundle, payload=2_000_000)
    dest = root / "host" / f"cuda-cu130-{transfer}.tar"
    res = play([push("first", bundle, dest, digest, transfer=transfer),
                push("again", bundle, dest, digest, transfer=transfer)], "--diff")
    first, again = res["first"], res["again"]
    assert (first["changed"], first["transferred"], first["before_manifest_sha256"]) == (True, True, None), first
    assert first["size"] == bundle.stat().st_size and first["placed"] == placed
    assert first["transfer"] == way
    assert first["diff"]["after"] == "manifest_sha256: %s\n" % digest
    assert dest.read_bytes() == bundle.read_bytes() and stat.S_IMODE(dest.stat().st_mode) == 0o640
    assert not [p.name for p in dest.parent.iterdir() if p.name.startswith(".")]   # no temp file beside it
    assert (again["changed"], again["transferred"], again["manifest_sha256"]) == (False, False, digest), again


def test_the_action_in_check_mode_transfers_nothing_and_refuses_a_wrong_digest(playbook):
    root, play = playbook
    old = root / "old.tar"
    old_digest = make_bundle(old)
    new = root / "new.tar"
    new_digest = make_bundle(new, manifest=manifest_bytes(new=True))
    dest = root / "host" / "b.tar"
    play([push("place the old one", old, dest, old_digest)])
    before = dest.read_bytes()

    res = play([push("check", new, dest, new_digest)], "--check", "--diff")
    assert (res["check"]["changed"], res["check"]["transferred"]) == (True, False), res["check"]
    assert res["check"]["diff"]["before"] == "manifest_sha256: %s\n" % old_digest
    assert dest.read_bytes() == before

    res = play([push("wrong digest", new, dest, "e" * 64)])
    wrong = res["wrong digest"]
    assert wrong["failed"] is True and wrong["transferred"] is True
    assert wrong["msg"].startswith("bundle_push: the received bundle's MANIFEST.json has sha256 %s" % new_digest)
    assert dest.read_bytes() == before
    assert not [p.name for p in dest.parent.iterdir() if p.name.startswith(".")]   # no temp file beside it

    res = play([push("missing src", root / "nope.tar", dest, new_digest)])
    assert res["missing src"]["failed"] is True and "nope.tar" in res["missing src"]["msg"]
