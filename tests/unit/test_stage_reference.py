"""The deploy's own staging (playbooks/tasks/stage_artifacts.yml) reads the reference host's settings from the
reference host, and refuses in one line, before any change, what it needs and cannot stage.

The real playbooks/deploy_dflash.yml runs with the real stage step and host_layout, the other roles replaced by
stubs (a stub task that ran shows in the output), over one local target `t1` and a reference host `ref`:

- `ref` is local, with dflash_reference_venv (a real venv holding torch, triton and an nvidia-*) and
  host_layout_base_dir set as ITS host vars only, neither at the default: the bundle is packed from that venv, in
  ref's capture directory, and fetched into the controller's store (the target's vars name neither, and its
  layout is not touched).
- `ref` at 127.0.0.1:9 (nothing listens) with the bundle missing: one failure line naming ref, that it does not
  answer and the missing bundle, with the alternatives; rc 2; t1 is reported failed, not unreachable; no stub
  ran and nothing was written. With the bundle not needed (cuda_overlay_source=index), the deploy goes on.
- no dflash_controller_dir: one line naming both dflash_controller_dir and dflash_artifact_store_host, printed
  once, outside ansible-core's error chain, before any host is contacted.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from transplant_support import add_dist, make_venv

REPO = Path(__file__).resolve().parents[2]
STUBBED = ("host_lock", "host_preflight", "sglang_service", "rollout", "sglang_venv", "dflash_overlay", "cuda_overlay",
           "kernel_pin", "deploy_state")
ENTRIES = ("main", "stage", "release", "settings", "prune", "forget", "record", "surge_leftovers", "check", "absent")
REFUSED = "Refuse what the deploy needs and cannot stage (before any change)"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the stage step writes root:root files")


@pytest.fixture(scope="module")
def coll(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stage-reference")
    coll = root / "collections" / "ansible_collections" / "dflash" / "deploy"
    (coll / "playbooks").mkdir(parents=True)
    for name in ("plugins", "meta"):
        (coll / name).symlink_to(REPO / name)
    (coll / "playbooks" / "tasks").symlink_to(REPO / "playbooks" / "tasks")
    (coll / "playbooks" / "deploy_dflash.yml").symlink_to(REPO / "playbooks" / "deploy_dflash.yml")
    (coll / "roles").mkdir()
    (coll / "roles" / "host_layout").symlink_to(REPO / "roles" / "host_layout")
    for role in STUBBED:
        (coll / "roles" / role / "tasks").mkdir(parents=True)
        for entry in ENTRIES:
            (coll / "roles" / role / "tasks" / f"{entry}.yml").write_text(yaml.safe_dump(
                [{"name": f"Stub {role} {entry}", "ansible.builtin.debug": {"msg": "stub"}}]))
    (root / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {root / 'collections'}\n"
                                      "retry_files_enabled = false\ncallbacks_enabled = dflash.deploy.deploy_summary\n")
    venv = make_venv(root / "elsewhere" / "known-good-venv")
    add_dist(venv, "torch", "2.11.0+cu130", {"torch/__init__.py": b"# +cu130\n"})
    add_dist(venv, "triton", "3.6.0", {"triton/__init__.py": b""})
    add_dist(venv, "nvidia-cublas", "13.1.0.3", {"nvidia/cublas/__init__.py": b""})
    return root


def run(root: Path, ref: dict, controller: bool = True, callback: str = "ansible.posix.json",
        extra: dict | None = None) -> subprocess.CompletedProcess:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    target_vars = {**local, "host_layout_base_dir": str(root / "t1-base"), **(extra or {})}
    if controller:
        target_vars["dflash_controller_dir"] = str(root / "controller")
    inventory = {"all": {"children": {
        "dflash_reference": {"hosts": {"ref": ref}},
        "dflash_targets": {"hosts": {"t1": target_vars}}}}}
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK=callback, ANSIBLE_DEPRECATION_WARNINGS="false", DFLASH_PROGRESS_INTERVAL="0")
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    return subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(root / "hosts.yml"),
                           "dflash.deploy.deploy_dflash", "-l", "t1"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)


def tasks(proc) -> list[tuple[str, dict]]:
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    return [(t["task"]["name"].rsplit(" : ", 1)[-1], r) for play in out["plays"] for t in play["tasks"]
            for r in t["hosts"].values()]


def test_the_bundle_is_packed_from_the_venv_the_reference_host_names(coll):
    ref = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
           "dflash_reference_venv": str(coll / "elsewhere" / "known-good-venv"),
           "host_layout_base_dir": str(coll / "ref-base")}
    proc = run(coll, ref)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    [pack] = [r for name, r in tasks(proc) if name == "Pack the CUDA 13 distributions into one bundle"
              and not r.get("skipped")]
    # The distributions of the venv ref names (not /root/venv_sglang211), in ref's capture directory.
    assert pack["distributions"] == [{"name": "nvidia-cublas", "version": "13.1.0.3"},
                                     {"name": "torch", "version": "2.11.0+cu130"},
                                     {"name": "triton", "version": "3.6.0"}], pack
    assert pack["bundle"] == f"{coll}/ref-base/artifacts/stage/cuda-cu130.tar"
    with tarfile.open(coll / "controller" / "artifacts" / "cuda-cu130.tar") as tar:
        names = tar.getnames()
    assert "site-packages/torch/__init__.py" in names and "MANIFEST.json" in names, names
    assert not (coll / "t1-base").exists()


def test_a_reference_host_down_with_the_bundle_missing_is_one_line_and_changes_nothing(coll):
    artifacts = coll / "controller" / "artifacts"
    if (artifacts / "cuda-cu130.tar").exists():
        (artifacts / "cuda-cu130.tar").unlink()
    before = sorted(p.name for p in coll.iterdir() if p.name != "hosts.yml")  # the harness's inventory (run writes it)
    ref = {"ansible_host": "127.0.0.1", "ansible_port": 9,
           "ansible_ssh_common_args": "-o ConnectTimeout=2 -o BatchMode=yes"}
    proc = run(coll, ref, callback="ansible.builtin.default")
    out = proc.stdout
    assert proc.returncode == 2, out[-3000:] + proc.stderr[-2000:]
    line = (f"the reference host ref does not answer (down or unreachable) and the staged artifacts are missing "
            f"(no CUDA bundle cuda-cu130.tar in {artifacts}): start ref and run again (the deploy stages them from "
            f"it), or copy them into {artifacts} from a controller that has them, or set dflash_artifact_store_host "
            "to a host that keeps them, or set cuda_overlay_source=index")
    summary = out.split("DFLASH DEPLOY SUMMARY", 1)[1].splitlines()
    assert summary[1:3] == [f't1: FAILED in play at "{REFUSED}"', f"  cause: {line}"], summary
    assert f'"msg": "{line}"' in out or f"msg: {line}" in out, out[-3000:]
    assert not any(s.startswith("t1: UNREACHABLE") for s in summary), summary
    recap = next(s for s in out.splitlines() if s.startswith("t1 "))
    assert "unreachable=0" in recap and "failed=1" in recap, recap
    assert "Stub " not in out                           # no role ran: no lock, no preflight, no change
    assert sorted(p.name for p in coll.iterdir() if p.name != "hosts.yml") == before and not (coll / "t1-base").exists()
    assert not (artifacts / "cuda-cu130.tar").exists()

    # The bundle not needed (the roles install torch from an index): the deploy goes on without it.
    proc = run(coll, ref, extra={"cuda_overlay_source": "index"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    names = [name for name, r in tasks(proc) if not r.get("skipped")]
    assert "Say the reference host is down" in names and "Stub host_lock main" in names, names


def test_an_inventory_without_a_controller_dir_is_one_line_printed_once(coll):
    ref = {"ansible_host": "127.0.0.1", "ansible_port": 9}
    proc = run(coll, ref, controller=False, callback="ansible.builtin.default")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    line = ("dflash_controller_dir is not set: set it in the inventory to a controller directory that keeps the staged "
            "artifacts and survives the run, or set dflash_artifact_store_host to an inventory host that keeps them "
            "(a controller that keeps nothing, as an AWX job's)")
    # One failed task (ansible-core prints its [ERROR] and fatal lines), and the summary's cause: no rescue's repeat.
    assert out.count("fatal: [t1]") == 1 and out.count("[ERROR]: ") == 1, out[-3000:]
    assert f"[ERROR]: Task failed: Action failed: {line}\n" in out, out[-3000:]
    assert f"  cause: {line}\n" in out and out.count(line) == 3, out[-3000:]
    assert "caused by" not in out and "Finalization of task args" not in out, out[-3000:]
    assert "Stub " not in out and "Check that the reference host answers" not in out
