"""bundle_push over the lab's OpenSSH, as cuda_overlay's "Push the bundle" runs it (the role's connection
variables, read from its tasks): the bundle streamed through one `ssh ... 'cat > file'` arrives byte for
byte, and a re-run transfers nothing; `transfer: put_file` (sftp) arrives the same; a streamed file that is
not the bundle the task names is refused with the host's copy untouched. Ansible's remote tmp dir is left
empty every time. Against ct200, in /root/bundle-push-test (removed at the end)."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, VENV_BIN, ansible_env, shell

sys.path.insert(0, str(REPO / "bench"))
from bench_push import role_push_vars, role_transfer_args  # noqa: E402  (the role's own push variables)
from bundle_tar import make_bundle, manifest_bytes  # noqa: E402

HOST = "ct200"
DIR = "/root/bundle-push-test"


@pytest.fixture(scope="module")
def push(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle-push-ssh")
    assert shell(HOST, f"rm -rf {DIR} && mkdir -p {DIR}/tmp")["rc"] == 0

    def run(src: Path, digest: str, **kw) -> dict:
        task = {"name": "push", "vars": dict(role_push_vars(role_transfer_args()), ansible_remote_tmp=f"{DIR}/tmp"),
                "dflash.deploy.bundle_push": dict(src=str(src), dest=f"{DIR}/cuda-cu130.tar",
                                                  manifest_sha256=digest, **kw), "ignore_errors": True}
        (root / "play.yml").write_text(yaml.safe_dump([{"hosts": HOST, "gather_facts": False, "tasks": [task]}]))
        proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), str(root / "play.yml")], cwd=REPO,
                              env=ansible_env(), capture_output=True, text=True, timeout=300, check=False)
        out = json.loads(proc.stdout[proc.stdout.index("{"):])
        assert shell(HOST, f"ls -A {DIR}/tmp")["stdout"] == "", "Ansible's remote tmp dir was left behind"
        return out["plays"][0]["tasks"][0]["hosts"][HOST]

    yield root, run
    shell(HOST, f"rm -rf {DIR}")


def host_sha256() -> str:
    return shell(HOST, f"sha256sum {DIR}/cuda-cu130.tar")["stdout"].split()[0]


def test_the_bundle_streams_over_ssh_byte_for_byte_and_a_rerun_transfers_nothing(push):
    root, run = push
    bundle = root / "a.tar"
    digest = make_bundle(bundle, payload=6_000_000)
    first = run(bundle, digest)
    assert (first.get("failed"), first["changed"], first["transferred"], first["transfer"]) == \
        (None, True, True, "ssh_stream"), first
    assert host_sha256() == hashlib.sha256(bundle.read_bytes()).hexdigest()
    again = run(bundle, digest)
    assert (again["changed"], again["transferred"], again["before_manifest_sha256"]) == (False, False, digest)


def test_put_file_arrives_the_same(push):
    root, run = push
    bundle = root / "b.tar"
    digest = make_bundle(bundle, manifest=manifest_bytes(which="b"), payload=3_000_000)
    out = run(bundle, digest, transfer="put_file")
    assert (out["changed"], out["transferred"], out["transfer"]) == (True, True, "put_file"), out
    assert host_sha256() == hashlib.sha256(bundle.read_bytes()).hexdigest()


def test_a_streamed_file_that_is_not_the_named_bundle_is_refused_and_the_hosts_copy_kept(push):
    root, run = push
    before = host_sha256()
    bundle = root / "c.tar"
    make_bundle(bundle, manifest=manifest_bytes(which="c"))
    out = run(bundle, "e" * 64)
    assert out["failed"] is True and "\n" not in out["msg"], out
    assert "is not the manifest_sha256" in out["msg"] or "not the manifest_sha256" in out["msg"], out["msg"]
    assert out["msg"].endswith("; %s/cuda-cu130.tar left as it was" % DIR)
    assert host_sha256() == before
