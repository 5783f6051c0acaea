# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's hashes of its default versions (issue 46, item 3): roles/sglang_venv/vars/main.yml holds the
sha256 of every file the installer's default index serves for the versions the role's defaults name
(tools/default_stack_hashes.py wrote it; its --check needs the network and is not run here), and
tasks/lock_hashes.yml counts them as known while sglang_venv_default_stack_hashes is true: a fresh host of a fresh
fleet (no release, no fleet file, nothing pinned) refuses other bytes under those names and versions, naming the
collection's hashes; with the variable false (the lab's fixtures) it takes them. The GPU kit's pinned real wheels
are among the shipped hashes."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import yaml
from role_collection import role_collection, run_play_json

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "roles" / "sglang_venv" / "vars" / "main.yml"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mod = _load("dflash_lock_hashes_default_stack", REPO / "plugins" / "filter" / "lock_hashes.py")
tool = _load("dflash_default_stack_hashes_tool", REPO / "tools" / "default_stack_hashes.py")
TABLE = yaml.safe_load(SHIPPED.read_text())["_sglang_venv_default_stack_hashes"]
SOURCE = ("the collection's hashes of its default versions (roles/sglang_venv/vars/main.yml; "
          "sglang_venv_default_stack_hashes=false leaves them out)")
PUBLISHED = "0cdf73e8d463df53010c33017c7baa68ce5f2d0bf7d015923d6b37b809ca7c50"  # sglang 0.5.11 cp312 x86_64
FIXTURE = "f1" * 32  # the lab's fixture sglang 0.5.11: the same name and version, other bytes
TORCH = "c" * 64


def _lock(*hashes: str, torch: bool = True) -> str:
    """A lock as `uv pip compile --generate-hashes` writes it: sglang 0.5.11 with these files, and torch."""
    text = "sglang==0.5.11 \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in hashes) + "\n"
    return text + (f"torch==2.11.0 \\\n    --hash=sha256:{TORCH}\n" if torch else "")


def test_the_shipped_file_names_each_default_version_with_every_file_and_how_it_was_made():
    defaults = yaml.safe_load((REPO / "roles" / "sglang_venv" / "defaults" / "main.yml").read_text())
    assert defaults["sglang_venv_default_stack_hashes"] is True
    # the versions the defaults name, and only those: a default changed without the tool run fails here
    assert sorted(TABLE) == tool.default_pins() == [
        "sglang==" + defaults["sglang_venv_sglang_version"], defaults["sglang_venv_overlay_base"].replace("[all]", "")]
    for key, hashes in TABLE.items():
        assert key == mod._key(*key.split("==")), key  # normalized as the filter keys a lock
        assert hashes == sorted(set(hashes)) and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), key
    # uv's default index on 2026-12-07: sglang 0.5.11 eight wheels (cp310-cp313, x86_64 and aarch64), no sdist;
    # sglang 0.5.9 one wheel and the sdist
    assert {k: len(v) for k, v in TABLE.items()} == {"sglang==0.5.11": 8, "sglang==0.5.9": 2}
    assert PUBLISHED in TABLE["sglang==0.5.11"]
    text = SHIPPED.read_text()
    assert re.search(r"^# Generated \d{4}-\d{2}-\d{2} with uv [0-9.]+ by `\.venv/bin/python tools/default_stack_hashes"
                     r"\.py`$", text, re.M), text[:1200]
    assert tool.render(TABLE, tool.GENERATED.search(text).group(0)) == text  # the tool's own output, not hand-kept
    # the repository names no registry host: uv's own default index, unnamed
    assert not re.search(r"https?://|pypi", text + (REPO / "tools" / "default_stack_hashes.py").read_text())


def test_a_default_version_with_bytes_the_collection_did_not_record_is_refused_naming_its_hashes():
    shipped = [{"source": SOURCE, "hashes": TABLE}]
    errors = mod.lock_hash_errors(_lock(FIXTURE), shipped, [])
    assert len(errors) == 1
    assert errors[0].startswith(
        f"sglang==0.5.11 is sha256 {FIXTURE[:16]}…, but {SOURCE} recorded sha256 0cdf73e8d463df53…")
    assert f"sha256 {FIXTURE} is in no record" in errors[0]
    assert "sglang_venv_accept_new_hashes=true" in errors[0]
    assert "sglang_venv_pinned_hashes['sglang==0.5.11']" in errors[0]
    # from a wheelhouse the refusal names the wheel
    wheel = "/opt/dflash/artifacts/wheelhouse/sglang-0.5.11-py3-none-any.whl"
    assert mod.lock_hash_errors(_lock(FIXTURE), shipped, [wheel])[0].startswith(
        "wheel sglang-0.5.11-py3-none-any.whl (sglang==0.5.11) is sha256")
    # one file added beside the published ones (an index serving one more) is refused too
    assert len(mod.lock_hash_errors(_lock(*TABLE["sglang==0.5.11"], FIXTURE), shipped, [])) == 1
    # the published files pass: the one a wheelhouse holds, or all of them from the index; torch is no default version
    assert mod.lock_hash_errors(_lock(PUBLISHED), shipped, []) == []
    assert mod.lock_hash_errors(_lock(*TABLE["sglang==0.5.11"]), shipped, []) == []
    # another version is not the shipped one's
    assert mod.lock_hash_errors(_lock(FIXTURE).replace("0.5.11", "0.5.12"), shipped, []) == []
    # pinned beside them, the fixture's hash is known
    pinned = {"source": "sglang_venv_pinned_hashes", "hashes": {"sglang==0.5.11": [FIXTURE]}}
    assert mod.lock_hash_errors(_lock(FIXTURE), [pinned, *shipped], []) == []


def test_the_gpu_kits_real_wheels_are_among_the_shipped_hashes():
    """The kit pins the published files the GPU runs start from (tests/gpu/kit/*.txt, pip checks them)."""
    checked = []
    for path in sorted((REPO / "tests" / "gpu" / "kit").glob("*.txt")):
        for key, hashes in mod.lock_hashes(path.read_text()).items():
            if key in TABLE:
                assert hashes and set(hashes) <= set(TABLE[key]), (path.name, key, hashes)
                checked.append(key)
    assert sorted(checked) == ["sglang==0.5.11", "sglang==0.5.9"]


def test_a_fresh_host_of_a_fresh_fleet_refuses_the_fixture_unless_the_switch_is_off(tmp_path):
    """The role's own lock_hashes.yml, real ansible-playbook over local hosts with no release, no fleet file and
    nothing pinned: the fixture's bytes are refused by the shipped hashes, taken with the switch off (as the lab
    sets it) or with sglang_venv_accept_new_hashes; the published file passes with the switch on."""
    role_collection(tmp_path, ("host_layout", "sglang_venv"))
    facts = {"sglang_venv_lock": "{{ lock_text }}", "sglang_venv_release_id": "r-{{ inventory_hostname }}",
             "_sglang_venv_uv_ready": True,
             "sglang_venv_release_dir": "{{ sglang_venv_base_dir }}/releases/r-{{ inventory_hostname }}"}
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "A fresh host checks its lock", "hosts": "all", "gather_facts": False, "tasks": [
            {"name": "Set what the role's earlier tasks set", "ansible.builtin.set_fact": facts},
            {"name": "Run the role's tasks", "ansible.builtin.include_role": {
                "name": "dflash.deploy.sglang_venv", "tasks_from": "lock_hashes"}}]}]))
    hosts = {"fixture_on": {"lock_text": _lock(FIXTURE)},
             "fixture_off": {"lock_text": _lock(FIXTURE), "sglang_venv_default_stack_hashes": False},
             "fixture_accepted": {"lock_text": _lock(FIXTURE), "sglang_venv_accept_new_hashes": True},
             "published_on": {"lock_text": _lock(PUBLISHED)}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "sglang_venv_base_dir": str(tmp_path / "hosts") + "/{{ inventory_hostname }}"}, "hosts": hosts}}))
    rc, out = run_play_json(tmp_path)
    assert rc != 0
    checks = {host: result for task in out["plays"][0]["tasks"] for host, result in task["hosts"].items()
              if task["task"]["name"].rsplit(" : ", 1)[-1].startswith("Refuse a lock")}
    assert sorted(checks) == sorted(hosts), out
    assert {h for h, r in checks.items() if r.get("failed")} == {"fixture_on"}
    message = checks["fixture_on"]["msg"]
    assert message.startswith("release r-fixture_on was not built, nothing was installed or switched: "
                              f"sglang==0.5.11 is sha256 {FIXTURE[:16]}…, but {SOURCE} recorded sha256 "), message
    assert f"sha256 {FIXTURE} is in no record" in message and "torch" not in message and "\n" not in message.strip()
    assert not (tmp_path / "hosts").exists()  # nothing was built anywhere


ROUTER_SHIPPED = REPO / "roles" / "sglang_router" / "vars" / "main.yml"
ROUTER_TABLE = yaml.safe_load(ROUTER_SHIPPED.read_text())["_sglang_router_default_hashes"]
ROUTER_PUBLISHED = "ba5a24951e5e0357fe390782fcd1abd861448a87216832dbf2e501a1dd1548eb"  # 0.3.2 manylinux x86_64


def test_the_routers_shipped_file_names_its_default_version_and_the_kits_wheel():
    defaults = yaml.safe_load((REPO / "roles" / "sglang_router" / "defaults" / "main.yml").read_text())
    assert defaults["sglang_router_default_hashes"] is True
    assert sorted(ROUTER_TABLE) == tool.router_pins() == ["sglang-router==" + defaults["sglang_router_version"]]
    # uv's default index on 2026-12-07: sglang-router 0.3.2, eight files
    assert {k: len(v) for k, v in ROUTER_TABLE.items()} == {"sglang-router==0.3.2": 8}
    assert ROUTER_PUBLISHED in ROUTER_TABLE["sglang-router==0.3.2"]
    text = ROUTER_SHIPPED.read_text()
    assert tool.render_router(ROUTER_TABLE, tool.GENERATED.search(text).group(0)) == text
    assert not re.search(r"https?://|pypi", text)
    # the GPU kit's real router wheel (set c, the surge step) is among them
    kit = mod.lock_hashes((REPO / "tests" / "gpu" / "kit" / "c.txt").read_text())
    assert kit["sglang-router==0.3.2"] and set(kit["sglang-router==0.3.2"]) <= set(ROUTER_TABLE["sglang-router==0.3.2"])


def _router_lock(*hashes: str, version: str = "0.3.2") -> str:
    text = f"sglang-router=={version} \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in hashes) + "\n"
    return text + "uvicorn==0.38.0 \\\n    --hash=sha256:" + "d" * 64 + "\n"


def test_the_router_install_refuses_a_lock_with_bytes_the_collection_does_not_record(tmp_path):
    """The router role's own install_lock.yml, real ansible-playbook over local hosts, uv a stand-in that prints
    each host's lock: the fixture's bytes under the default version are refused in one line naming the hashes and
    how to take them; the published file passes, as does another version, or the switch off; a package without
    a sha256 is refused whatever the switch."""
    role_collection(tmp_path, ("host_layout", "instances", "sglang_router"))
    uv = tmp_path / "uv"
    uv.write_text('#!/bin/sh\ncase "$1" in python) echo /usr/bin/python3;; pip) cat "$LOCK_FILE";; esac\n')
    uv.chmod(0o755)
    locks = {"fixture_on": _router_lock(FIXTURE), "published_on": _router_lock(ROUTER_PUBLISHED),
             "fixture_off": _router_lock(FIXTURE), "other_version": _router_lock(FIXTURE, version="0.3.3"),
             "no_hash_off": "sglang-router==0.3.2\n"}
    hosts = {}
    for host, lock in locks.items():
        (tmp_path / f"{host}.lock").write_text(lock)
        hosts[host] = {"_sglang_router_uv_env": {"LOCK_FILE": str(tmp_path / f"{host}.lock")}}
    hosts["fixture_off"]["sglang_router_default_hashes"] = False
    hosts["no_hash_off"]["sglang_router_default_hashes"] = False
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "sglang_router_uv_path": str(uv),
        "_sglang_router_uv_index_env": {}, "_sglang_router_index_args": [],
        "sglang_router_base_dir": str(tmp_path / "hosts") + "/{{ inventory_hostname }}"}, "hosts": hosts}}))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "The router's lock", "hosts": "all", "gather_facts": False, "tasks": [
            {"name": "Lock and check", "ansible.builtin.include_role": {
                "name": "dflash.deploy.sglang_router", "tasks_from": "install_lock", "rolespec_validate": False}}]}]))
    rc, out = run_play_json(tmp_path)
    assert rc != 0
    checks = {host: result for task in out["plays"][0]["tasks"] for host, result in task["hosts"].items()
              if task["task"]["name"].rsplit(" : ", 1)[-1].startswith("Refuse a router lock")}
    assert sorted(checks) == sorted(hosts), out
    assert {h for h, r in checks.items() if r.get("failed")} == {"fixture_on", "no_hash_off"}, checks
    message = checks["fixture_on"]["msg"]
    assert message.startswith(f"sglang-router 0.3.2 was not installed in {tmp_path}/hosts/fixture_on/router/0.3.2: "
                              f"sglang-router==0.3.2 is sha256 {FIXTURE[:16]}…, but the collection's hashes of the "
                              "router's default version (roles/sglang_router/vars/main.yml) recorded sha256 "), message
    assert f"sha256 {FIXTURE} is in no record" in message and message.strip().endswith(
        "take it on purpose with sglang_router_default_hashes=false") and "uvicorn" not in message
    assert "has no sha256 in the lock" in checks["no_hash_off"]["msg"]
    assert not (tmp_path / "hosts").exists()  # nothing was installed anywhere
