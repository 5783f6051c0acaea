"""The deploy stages what it lacks from the reference host as the inventory describes it, and refuses in one line,
before any change, when that host is down.

Both runs use the lab inventory with an empty controller store (dflash_controller_dir: a fresh directory, so the
bundle is missing) and with dflash_reference_venv set only as ct129's host var, at a path that is not the default
(/root/venv_sglang211, renamed on ct129 for the first test; the lab's group_vars line that sets it for every host
is dropped):

1. deploy_dflash.yml's stage step (its own task, taken from the playbook), `-l ct200`: the bundle is packed from
   ct129's renamed venv and fetched into the controller's store.
2. ct129 at 10.89.64.129 port 9 (nothing listens there): `deploy_dflash.yml -l ct200` ends rc 2 with one failure
   line naming ct129, that it does not answer, the missing bundle and the alternatives; ct200 is failed, not
   unreachable, and nothing on it changed (no connection reached it).
"""
from __future__ import annotations

import json
import subprocess
import time

import yaml
from conftest import REPO, VENV_BIN, ansible_env, lab

VENV = "/root/venv_sglang211"
RENAMED = "/root/venv_reference_b1"


def host(name: str):
    return next(h for h in lab.hosts() if h.name == name)


def inventory(tmp_path, ct129: dict) -> str:
    text = lab.INVENTORY.read_text().replace("{{ inventory_dir }}/..", str(REPO))
    hosts = yaml.safe_load(text)
    hosts["lab"]["vars"]["dflash_controller_dir"] = str(tmp_path / "controller")       # an empty store
    hosts["lab"]["children"]["dflash_reference"]["hosts"]["ct129"] = {"ansible_host": "10.89.64.129", **ct129}
    group_vars = yaml.safe_load((REPO / "inventory" / "group_vars" / "lab.yml").read_text())
    del group_vars["dflash_reference_venv"]                           # set on the reference host only
    (tmp_path / "group_vars").mkdir(exist_ok=True)
    (tmp_path / "group_vars" / "lab.yml").write_text(yaml.safe_dump(group_vars))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return str(tmp_path / "hosts.yml")


def deploy(hosts: str, playbook: str = "playbooks/deploy_dflash.yml") -> tuple[int, dict, float]:
    started = time.monotonic()
    proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), playbook, "-i", hosts, "-l", "ct200"], cwd=REPO,
                          env=ansible_env(), capture_output=True, text=True, timeout=300)
    try:
        return proc.returncode, json.loads(proc.stdout), time.monotonic() - started
    except json.JSONDecodeError:
        raise AssertionError(f"rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}") from None


def results(out: dict, name: str) -> list[dict]:
    return [r for play in out["plays"] for t in play["tasks"] if t["task"]["name"].rsplit(" : ", 1)[-1] == name
            for r in t["hosts"].values() if not r.get("skipped")]


def stage_step(tmp_path) -> str:
    """deploy_dflash.yml's stage step alone (its include, as the deploy names the reference host): no lock, no
    argument checks of the roles the full play includes, which `--tags stage` still runs."""
    plays = yaml.safe_load((REPO / "playbooks" / "deploy_dflash.yml").read_text())
    block = next(t for t in plays[0]["tasks"] if "block" in t and "rescue" in t)["block"]
    [stage] = [t for t in block if t["name"] == "Stage artifacts from the reference host when they are missing"]
    stage["ansible.builtin.include_tasks"]["file"] = str(REPO / "playbooks" / "tasks" / "stage_artifacts.yml")
    play = {k: plays[0][k] for k in ("name", "hosts", "gather_facts", "become")}
    (tmp_path / "stage.yml").write_text(yaml.safe_dump([{**play, "tasks": [stage]}], sort_keys=False))
    return str(tmp_path / "stage.yml")


def test_the_deploy_stages_from_the_venv_the_reference_host_names(tmp_path):
    ct129 = host("ct129")
    hosts = inventory(tmp_path, {"dflash_reference_venv": RENAMED})
    lab.hexec(ct129, f"mv {VENV} {RENAMED}")
    try:
        rc, out, seconds = deploy(hosts, stage_step(tmp_path))
    finally:
        lab.hexec(ct129, f"if [ -d {RENAMED} ]; then mv {RENAMED} {VENV}; fi", check=False)
    print(f"stage from ct129's {RENAMED}: {seconds:.1f} s")
    assert rc == 0, [r.get("msg") for play in out["plays"] for t in play["tasks"] for r in t["hosts"].values()
                     if r.get("failed")]
    [pack] = results(out, "Pack the CUDA 13 distributions into one bundle")
    assert pack["bundle"] == "/opt/dflash/artifacts/stage/cuda-cu130.tar", pack
    assert any(d["name"] == "torch" for d in pack["distributions"]), pack
    assert (tmp_path / "controller" / "artifacts" / "cuda-cu130.tar").stat().st_size > 0


def ct200_state() -> str:
    """What a refused run must leave alone on ct200: its layout, units, lock and login records."""
    return lab.hexec(host("ct200"), "ls -la --time-style=full-iso /opt /opt/dflash /run /etc/dflash "
                                    "/var/lib/dflash 2>&1 || true; "
                                    "systemctl list-units --all --no-legend 'sglang-dflash*' || true").stdout


def test_a_reference_host_down_with_the_bundle_missing_is_one_line_and_ct200_is_untouched(tmp_path):
    hosts = inventory(tmp_path, {"dflash_reference_venv": RENAMED, "ansible_port": 9})
    before = ct200_state()
    rc, out, seconds = deploy(hosts)
    print(f"refused with ct129 down: {seconds:.1f} s")
    assert rc == 2
    stats = out["stats"]["ct200"]
    assert (stats["unreachable"], stats["failures"], stats["changed"]) == (0, 1, 0), stats
    [refusal] = results(out, "Refuse what the deploy needs and cannot stage (before any change)")
    store = tmp_path / "controller" / "artifacts"
    assert refusal["msg"] == (
        f"the reference host ct129 does not answer (down or unreachable) and the staged artifacts are missing (no "
        f"CUDA bundle cuda-cu130.tar in {store}): start ct129 and run again (the deploy stages them from it), or copy "
        f"them into {store} from a controller that has them, or set dflash_artifact_store_host to a host that keeps "
        "them, or set cuda_overlay_source=index")
    assert ct200_state() == before
    assert not store.exists()
