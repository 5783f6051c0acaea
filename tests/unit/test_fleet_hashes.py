# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's recorded hashes (sglang_venv's fleet_hashes.yml and lock_hashes.yml, real ansible-playbook over
local hosts): the hosts that built a release, one batch at a time, merge their locks' hashes into one file kept
with the staged artifacts (in dflash_controller_dir, or in the artifact store host's store); a host with no release
yet then refuses a lock with a hash for a recorded name==version that no host recorded (trust on first use per
host becomes per fleet), before anything is built, and writes nothing. A second merge of the same hashes
changes nothing."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml
from role_collection import role_collection, run_play_json

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("dflash_lock_hashes_fleet",
                                               REPO / "plugins" / "filter" / "lock_hashes.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)

ORIGINAL, ADDED, TORCH = "a" * 64, "e" * 64, "c" * 64
RECORDED = f"triton==3.6.0 \\\n    --hash=sha256:{ORIGINAL}\n"
TORCH_LOCK = f"torch==2.11.0 \\\n    --hash=sha256:{TORCH}\n"
GROWN = f"triton==3.6.0 \\\n    --hash=sha256:{ORIGINAL} \\\n    --hash=sha256:{ADDED}\n"


def _play(hosts: str, name: str, tasks_from: str, facts: dict, serial: int = 1) -> dict:
    return {"name": name, "hosts": hosts, "gather_facts": False, "serial": serial, "tasks": [
        {"name": "Set what the role's earlier tasks set", "ansible.builtin.set_fact": facts},
        {"name": "Run the role's tasks", "ansible.builtin.include_role": {
            "name": "dflash.deploy.sglang_venv", "tasks_from": tasks_from}}]}


def _write_lab(root: Path, store: bool) -> Path:
    coll_root = root / "coll"
    coll_root.mkdir()
    role_collection(coll_root, ("host_layout", "sglang_venv"))
    built = {"sglang_venv_lock": "{{ lock_text }}", "sglang_venv_release_id": "r-{{ inventory_hostname }}"}
    fresh = {**built, "_sglang_venv_uv_ready": True,
             "sglang_venv_release_dir": "{{ sglang_venv_base_dir }}/releases/r-{{ inventory_hostname }}"}
    (root / "play.yml").write_text(yaml.safe_dump([
        _play("built", "Two hosts build, one batch at a time", "fleet_hashes", built),
        _play("built", "The same hashes again, both in one batch", "fleet_hashes", built, serial=2),
        _play("fresh", "A host with no release checks its lock", "lock_hashes", fresh)]))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    where = ({"dflash_artifact_store_host": "store", "dflash_artifact_store_dir": str(root / "store")} if store
             else {"dflash_controller_dir": str(root / "controller")})
    (root / "store" if store else root / "controller").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {**local, **where, "sglang_venv_base_dir": str(root / "hosts") + "/{{ inventory_hostname }}"},
        "hosts": {"store": {}},
        "children": {"built": {"hosts": {"h1": {"lock_text": RECORDED}, "h2": {"lock_text": TORCH_LOCK}}},
                     "fresh": {"hosts": {"h3": {"lock_text": GROWN}}}}}}))
    return (root / "store" if store else root / "controller") / "fleet-hashes.json"


def _results(out: dict, play: str, prefix: str) -> list[tuple[str, dict]]:
    return [(host, result) for p in out["plays"] if p["play"]["name"] == play for task in p["tasks"]
            if task["task"]["name"].rsplit(" : ", 1)[-1].startswith(prefix) for host, result in task["hosts"].items()]


@pytest.mark.parametrize("store", [False, True], ids=["controller", "store-host"])
def test_a_fresh_host_refuses_a_hash_the_fleet_did_not_record(tmp_path, store):
    fleet = _write_lab(tmp_path, store)
    rc, out = run_play_json(tmp_path, tmp_path / "coll" / "ansible.cfg")
    assert rc != 0
    # The first play wrote once per batch (h1's lock, then h2's merged in); the second wrote nothing.
    merges = _results(out, "Two hosts build, one batch at a time", "Merge the batch's hashes")
    assert [(h, r.get("changed")) for h, r in merges if not r.get("skipped")] == [("h1", True), ("h2", True)]
    again = _results(out, "The same hashes again, both in one batch", "Merge the batch's hashes")
    assert [(h, r.get("changed")) for h, r in again if not r.get("skipped")] == [("h1", False)]
    recorded = {"triton==3.6.0": [ORIGINAL], "torch==2.11.0": [TORCH]}
    assert json.loads(fleet.read_text()) == {"hashes": recorded}
    # h3 has no release: the fleet's file is its record, and the added hash is refused by name, in one line.
    failed = [r for h, r in _results(out, "A host with no release checks its lock", "Refuse a lock") if r.get("failed")]
    assert len(failed) == 1, out
    where = ("store:" if store else "") + str(fleet)
    message = failed[0]["msg"]
    assert message.startswith("release r-h3 was not built, nothing was installed or switched: "), message
    assert (f"triton==3.6.0 is sha256 {ORIGINAL[:16]}…, {ADDED[:16]}…, but the fleet's hashes ({where}) recorded "
            f"sha256 {ORIGINAL[:16]}… for the same name and version: sha256 {ADDED} is in no record") in message
    assert "\n" not in message.strip()
    assert json.loads(fleet.read_text()) == {"hashes": recorded}  # the refused host recorded nothing
    assert not (tmp_path / "hosts" / "h3").exists()


def test_the_fleet_file_merges_sorted_and_a_foreign_file_is_refused_in_one_line():
    text = mod.fleet_hashes_merge("", [RECORDED, "Triton==3.6.0 \\\n    --hash=sha256:" + ADDED.upper(), "x==1\n"])
    assert json.loads(text) == {"hashes": {"triton==3.6.0": [ORIGINAL, ADDED]}} and text.endswith("}\n")
    assert mod.fleet_hashes_merge(text, [GROWN]) == text  # nothing new: the same text, nothing written
    assert mod.fleet_hashes(text) == {"triton==3.6.0": [ORIGINAL, ADDED]} and mod.fleet_hashes("") == {}
    for bad in ("[1]", "{}", '{"hashes": {"x==1": "a"}}', "not json"):
        with pytest.raises(Exception, match=r"^/f\.json is not the fleet's hashes file .*remove it to start anew$"):
            mod.fleet_hashes(bad, "/f.json")
