"""The key of a deploy's inputs (module_utils/converged/key.py, filter deploy_key): it changes with
anything a deploy reads on the controller, and not with what it does not read."""
from __future__ import annotations

import os
import re
from pathlib import Path

import yaml
from ansible_collections.dflash.deploy.plugins.filter.deploy_state import deploy_key, deploy_state_request
from ansible_collections.dflash.deploy.plugins.module_utils.converged import key as K

REPO = Path(__file__).resolve().parents[5]


def test_only_product_variables_count():
    names = ["sglang_service_instances", "dflash_controller_dir", "instances_present", "ansible_host",
             "dflash_deploy_report", "deploy_dflash_serial", "host_lock_wait", "deploy_state_enabled"]
    assert K.product_var_names(names) == ["dflash_controller_dir", "host_lock_wait", "sglang_service_instances"]


def test_vars_digest_is_order_free_and_sees_values():
    a = K.vars_sha256({"x": [1, {"b": 2, "a": 1}], "y": "s"})
    assert a == K.vars_sha256({"y": "s", "x": [1, {"a": 1, "b": 2}]})
    assert a != K.vars_sha256({"y": "s", "x": [1, {"a": 1, "b": 3}]})


def test_a_path_reached_through_another_inventory_directory_is_the_same_input():
    assert K.vars_sha256({"d": "/work/extensions/../inventory/../build"}) == K.vars_sha256({"d": "/work/build"})
    assert K.vars_sha256({"d": ["/a/./b"]}) == K.vars_sha256({"d": ["/a/b"]})
    assert K.vars_sha256({"u": "http://x/../y"}) != K.vars_sha256({"u": "http://y"})


def test_artifacts_digest_sees_a_touched_file_a_new_file_and_a_mode(tmp_path):
    tree = tmp_path / "dflash-src" / "python" / "sglang"
    tree.mkdir(parents=True)
    f = tree / "a.py"
    f.write_text("x = 1\n")
    first = K.artifacts_sha256([str(tmp_path)])
    assert first == K.artifacts_sha256([str(tmp_path), str(tmp_path), ""])
    (tree / "__pycache__").mkdir()
    (tree / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert K.artifacts_sha256([str(tmp_path)]) == first, "compiled Python is not an input"
    os.utime(f, ns=(1, 1))
    touched = K.artifacts_sha256([str(tmp_path)])
    assert touched != first
    (tree / "b.py").write_text("")
    added = K.artifacts_sha256([str(tmp_path)])
    assert added != touched
    f.chmod(0o600)
    assert K.artifacts_sha256([str(tmp_path)]) != added
    assert K.artifacts_sha256([str(tmp_path / "missing")]) != K.artifacts_sha256([])


def test_collection_digest_changes_with_a_role_file(tmp_path):
    (tmp_path / "roles" / "r" / "defaults").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "defaults" / "main.yml").write_text("r_x: 1\n")
    (tmp_path / "docs").mkdir()
    K._COLLECTION_CACHE.clear()
    first = K.collection_sha256(str(tmp_path))
    (tmp_path / "docs" / "x.md").write_text("docs are not code")
    K._COLLECTION_CACHE.clear()
    assert K.collection_sha256(str(tmp_path)) == first
    (tmp_path / "roles" / "r" / "defaults" / "main.yml").write_text("r_x: 2\n")
    K._COLLECTION_CACHE.clear()
    assert K.collection_sha256(str(tmp_path)) != first
    K._COLLECTION_CACHE.clear()


def test_deploy_key_from_hostvars(tmp_path):
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "cuda-cu130.tar").write_bytes(b"t")
    models = tmp_path / "weights"
    models.mkdir()
    hv = {"dflash_controller_dir": str(tmp_path), "sglang_venv_uv_controller_path": "/bin/true",
          "sglang_service_instances": [{"name": "a", "model_controller_dir": str(models)}],
          "ansible_host": "192.0.2.10", "dflash_deploy_report": {"status": "ok"}}
    first = deploy_key(hv, collection_root=str(REPO))
    assert set(first) == {"collection", "vars", "artifacts"}
    assert deploy_key(dict(hv, ansible_host="192.0.2.11", dflash_deploy_report={}),
                      collection_root=str(REPO)) == first
    (models / "config.json").write_text("{}")
    assert deploy_key(hv, collection_root=str(REPO))["artifacts"] != first["artifacts"]
    assert deploy_key(dict(hv, host_lock_wait=5), collection_root=str(REPO))["vars"] != first["vars"]


class Failing(dict):
    def __getitem__(self, name):
        raise RuntimeError("'lab_index_url' is undefined\nmore")


def test_a_variable_that_does_not_template_gives_no_key():
    assert deploy_key(Failing(sglang_venv_index_url="x")) == {
        "error": "the deploy's variables could not be read: 'lab_index_url' is undefined"}


def test_every_controller_path_variable_of_the_roles_is_an_input():
    """A role variable naming a controller path (``*_controller_dir`` or ``*_controller_path``) is in
    CONTROLLER_PATH_VARS, or is uv's command (resolved on the PATH), so the key sees its contents."""
    named = set()
    for spec in REPO.glob("roles/*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(spec.read_text())["argument_specs"] or {}).values():
            named |= {n for n in (entry.get("options") or {}) if re.search(r"_controller_(dir|path)$", n)}
    assert named, "no controller path variable found: the pattern no longer matches the roles"
    assert named - set(K.CONTROLLER_PATH_VARS) <= {"sglang_venv_uv_controller_path"}, named


def test_record_request_names_what_sglang_service_and_preflight_keep():
    req = deploy_state_request(
        [{"name": "a", "port": 30001, "served_model_name": "m", "model_path": "/srv/m/",
          "draft_model_path": "/srv/d"}],
        ["/etc/dflash/a.env", "/opt/dflash/bin/sglang-dflash-launch"],
        {"root": ["/opt/dflash", "/etc/dflash"], "shared": ["/opt/dflash/releases"], "service": ["/var/lib/dflash/a"]},
        {"base_dir": "/opt/dflash", "config_dir": "/etc/dflash", "release_dir": "/opt/dflash/releases/r1",
         "uv_path": "/opt/dflash/tools/uv", "user": "sglang", "group": "sglang"})
    assert "/opt/dflash/instances/a/current" in req["files"] and "/srv/m/config.json" in req["files"]
    assert "/srv/d/config.json" in req["files"] and "/opt/dflash/tools/uv" in req["files"]
    assert "/opt/dflash/releases/r1/.dflash-release/verified.json" in req["files"]
    # recorded absent: a surge worker's env file that appears was left by an interrupted run
    assert "/etc/dflash/a.surge.env" in req["files"]
    assert req["trees"] == ["/opt/dflash/releases/r1"] and req["units"] == ["sglang-dflash@a.service"]
    assert req["instances"] == [{"name": "a", "port": 30001, "served_model_name": "m",
                                 "env_file": "/etc/dflash/a.env"}]
    assert "/var/lib/dflash/a" in req["dirs"] and req["users"] == ["sglang"]
