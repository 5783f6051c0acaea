"""host_preflight's variables: the service's paths and account as sglang_service uses them, and the
names they had as sglang_service's (deprecated) still read.

The preflight checks and keeps the directories sglang_service writes to, so its paths must resolve
as sglang_service's do: sglang_service's variable when set, else host_layout's. The defaults are
evaluated by Ansible itself (the files' own text given as task vars, templated lazily as role
defaults are), with and without the variables a user may set.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
# host_preflight's variable -> sglang_service's -> host_layout's
SERVICE = {"base_dir": ("base_dir", "base_dir"), "config_dir": ("config_dir", "config_dir"),
           "state_dir": ("state_dir", "state_dir"), "cache_dir": ("cache_dir", "cache_dir"),
           "service_user": ("user", "service_user"), "service_group": ("group", "service_group")}
DEPRECATED = {"min_cuda_driver": "sglang_service_preflight_min_cuda_driver",
              "min_free_gb": "sglang_service_preflight_min_free_gb",
              "smoke_test_timeout": "sglang_service_preflight_smoke_test_timeout",
              "gpus_moved": "sglang_service_gpus_moved"}


def defaults(role: str) -> dict:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())


def test_the_paths_resolve_as_sglang_services_own_defaults():
    preflight, service = defaults("host_preflight"), defaults("sglang_service")
    for mine, (theirs, layout) in SERVICE.items():
        assert service[f"sglang_service_{theirs}"] == "{{ host_layout_%s }}" % layout, theirs
        assert preflight[f"host_preflight_{mine}"] == (
            "{{ sglang_service_%s | default(host_layout_%s) }}" % (theirs, layout)), mine


def test_every_variable_is_in_the_spec_and_every_deprecated_name_too():
    spec = yaml.safe_load((ROLES / "host_preflight" / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert set(defaults("host_preflight")) | set(DEPRECATED.values()) == set(options)
    for old in DEPRECATED.values():
        assert options[old]["description"].startswith("Deprecated"), old


def evaluate(cases: list) -> subprocess.CompletedProcess:
    """One play: per case, an assert over host_preflight's defaults with the case's variables set."""
    raw = {**defaults("host_layout"), **defaults("host_preflight")}
    tasks = [{"name": name, "vars": {**raw, **given},
              "ansible.builtin.assert": {"that": [f"{var} | string == {json.dumps(str(value))}"
                                                  for var, value in expected.items()], "quiet": True}}
             for name, given, expected in cases]
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="false")
    return subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", "/dev/stdin"],
                          input=yaml.safe_dump(play), env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def test_defaults_the_deprecated_names_and_sglang_services_paths(tmp_path):
    run = evaluate([
        ("nothing set", {}, {
            "host_preflight_min_cuda_driver": 13000, "host_preflight_min_free_gb": 20,
            "host_preflight_smoke_test_timeout": 30, "host_preflight_gpus_moved": False,
            "host_preflight_base_dir": "/opt/dflash", "host_preflight_config_dir": "/etc/dflash",
            "host_preflight_state_dir": "/var/lib/dflash", "host_preflight_cache_dir": "/var/cache/dflash",
            "host_preflight_service_user": "sglang", "host_preflight_service_group": "sglang"}),
        ("the deprecated names set", {
            "sglang_service_preflight_min_cuda_driver": 12080, "sglang_service_preflight_min_free_gb": 7,
            "sglang_service_preflight_smoke_test_timeout": 5, "sglang_service_gpus_moved": True}, {
            "host_preflight_min_cuda_driver": 12080, "host_preflight_min_free_gb": 7,
            "host_preflight_smoke_test_timeout": 5, "host_preflight_gpus_moved": True}),
        ("sglang_service's paths set", {
            "sglang_service_base_dir": "/srv/dflash", "sglang_service_state_dir": "/srv/state",
            "sglang_service_user": "svc", "host_layout_config_dir": "/etc/dflash2"}, {
            "host_preflight_base_dir": "/srv/dflash", "host_preflight_state_dir": "/srv/state",
            "host_preflight_service_user": "svc", "host_preflight_config_dir": "/etc/dflash2",
            "host_preflight_cache_dir": "/var/cache/dflash"}),
    ])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.stdout.count("ok: [localhost]") == 3, run.stdout[-3000:]
