"""The instance list has one owner, roles/instances: its defaults name the list under the names users
set, it is completed in one place (tasks_from: complete), and every role that reads it depends on it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
OWNER = REPO / "roles" / "instances"
PUBLIC = ("sglang_service_instances", "sglang_service_instance_defaults", "sglang_service_environment")


def task_files():
    return sorted(p for p in REPO.glob("roles/*/tasks/*.yml")) + sorted(REPO.glob("playbooks/**/*.yml"))


def test_the_list_is_completed_in_one_place():
    callers = [str(p.relative_to(REPO)) for p in task_files() if "instances_typed" in p.read_text()]
    assert callers == ["roles/instances/tasks/complete.yml"]
    assert not (OWNER / "tasks" / "main.yml").exists()  # as a dependency it runs no task


def test_the_owner_names_the_public_variables_and_no_other_role_does():
    names = yaml.safe_load((OWNER / "defaults" / "main.yml").read_text())
    assert set(PUBLIC) <= set(names)
    assert names["sglang_service_instances"] == "{{ dflash_instances | default(_instances_default) }}"
    spec = yaml.safe_load((OWNER / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    assert set(spec["main"]["options"]) == set(PUBLIC) and spec["complete"]["options"] == spec["main"]["options"]
    for other in sorted(p for p in (REPO / "roles").glob("*/defaults/main.yml") if OWNER not in p.parents):
        assert not set(PUBLIC) & set(yaml.safe_load(other.read_text()) or {}), other


def test_every_role_that_completes_or_reads_the_list_depends_on_its_owner():
    for role in sorted(p for p in (REPO / "roles").iterdir() if p.is_dir() and p != OWNER):
        text = "\n".join(p.read_text() for p in role.glob("*/*.yml") if p.parent.name in ("tasks", "defaults"))
        if "instances_present" not in text and "sglang_service_instances" not in text:
            continue
        deps = yaml.safe_load((role / "meta" / "main.yml").read_text()).get("dependencies") or []
        assert "dflash.deploy.instances" in [d["role"] if isinstance(d, dict) else d for d in deps], role.name


def test_the_list_is_completed_once_per_run_and_again_when_its_inputs_change():
    """host_preflight and sglang_service both call tasks_from: complete; in one run the second call finds the list
    done from the same inputs, and a later change of the inputs (a later play, set_fact) completes it again."""
    def inst(name, port):
        return {"name": name, "port": port, "gpus": [port - 30001], "model_path": f"/srv/models/{name}",
                "served_model_name": name}

    def complete(label):
        return {"name": f"Complete ({label})", "ansible.builtin.include_role": {
            "name": "dflash.deploy.instances", "tasks_from": "complete"}}

    def names(expected):
        return {"name": f"Present: {expected}", "ansible.builtin.assert": {
            "that": [f"instances_present | map(attribute='name') | list == {expected}"], "quiet": True}}

    play = [{"hosts": "localhost", "gather_facts": False, "vars": {"sglang_service_instances": [inst("a", 30001)]},
             "tasks": [complete("first"), names(["a"]), complete("same inputs"), names(["a"]),
                       {"name": "Change the inputs", "ansible.builtin.set_fact": {
                           "sglang_service_instances": [inst("a", 30001), inst("b", 30002)]}},
                       complete("new inputs"), names(["a", "b"])]}]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="false",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"))
    run = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", f"ansible_python_interpreter={sys.executable}", "/dev/stdin"],
                         input=yaml.safe_dump(play), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    header = "TASK [dflash.deploy.instances : Complete the instance list with its defaults]"
    outcomes = [part.split("\n", 2)[1].split(":")[0] for part in run.stdout.split(header)[1:]]
    assert outcomes == ["ok", "skipping", "ok"], run.stdout[-3000:]
