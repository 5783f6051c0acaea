"""The example AWX project (examples/awx-project): what AWX reads from a project, kept in step with the collection.

tests/lab/test_awx_runner.py runs its deploy and audit playbooks with ansible-runner, the way AWX runs a
job; these checks keep the files present and pointing at what the collection has.
"""
from __future__ import annotations

import configparser
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "examples" / "awx-project"
PLAYBOOKS = ("stage_artifacts", "deploy_dflash", "audit", "rollback")


def test_each_job_template_playbook_imports_the_collections_own():
    for name in PLAYBOOKS:
        [play] = yaml.safe_load((PROJECT / f"{name}.yml").read_text())
        assert play["ansible.builtin.import_playbook"] == f"dflash.deploy.{name}"
        assert (REPO / "playbooks" / f"{name}.yml").is_file()


def test_the_requirements_name_the_collection_at_this_version():
    [wanted] = yaml.safe_load((PROJECT / "collections" / "requirements.yml").read_text())["collections"]
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert wanted["name"] == f"{galaxy['namespace']}.{galaxy['name']}"
    assert galaxy["version"] in SpecifierSet(wanted["version"])


def test_the_config_enables_the_summary_and_leaves_awx_its_own_settings():
    cfg = configparser.ConfigParser()
    cfg.read(PROJECT / "ansible.cfg")
    assert cfg["defaults"]["callbacks_enabled"] == "dflash.deploy.deploy_summary"
    # AWX sets these for the job: a project that named them would fight it
    for key in ("inventory", "stdout_callback", "collections_path", "vault_password_file"):
        assert key not in cfg["defaults"], key
