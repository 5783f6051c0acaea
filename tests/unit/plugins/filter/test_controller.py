"""controller_command and artifact_store: the controller's inputs come from declared variables
or the controller's PATH, never from the playbook's directory; each failure names what to set."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

_spec = importlib.util.spec_from_file_location(
    "dflash_controller_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "controller.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)


@pytest.fixture
def uv(tmp_path):
    binary = tmp_path / "bin" / "uv"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return binary


def test_a_bare_name_is_found_on_the_path(uv, monkeypatch):
    monkeypatch.setenv("PATH", f"/nonexistent:{uv.parent}")
    assert mod.controller_command("uv") == str(uv)


def test_a_name_not_on_the_path_names_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AnsibleFilterError, match=r"no 'uv' on the controller's PATH .*set dflash_uv_path to its path"):
        mod.controller_command("uv")


def test_a_path_is_taken_as_given_when_it_is_executable(uv, monkeypatch):
    monkeypatch.setenv("HOME", str(uv.parent.parent))
    assert mod.controller_command(str(uv)) == str(uv)
    assert mod.controller_command("~/bin/uv") == str(uv)


@pytest.mark.parametrize("mode", [0o644, None])
def test_a_path_that_is_not_an_executable_file_is_refused(uv, mode):
    if mode is None:
        uv.unlink()
    else:
        uv.chmod(mode)
    with pytest.raises(AnsibleFilterError, match=rf"sglang_venv_uv_controller_path: {uv} is not an executable file"):
        mod.controller_command(str(uv), "sglang_venv_uv_controller_path")


def test_an_empty_value_is_refused():
    with pytest.raises(AnsibleFilterError, match="dflash_uv_path is empty"):
        mod.controller_command("")


def test_the_store_is_the_declared_directory(monkeypatch):
    monkeypatch.setenv("HOME", "/home/op")
    assert mod.artifact_store("/srv/dflash") == "/srv/dflash/artifacts"
    assert mod.artifact_store("~/dflash") == "/home/op/dflash/artifacts"


@pytest.mark.parametrize("value", ["", None, "  "])
def test_no_store_declared_is_one_line_naming_what_to_set(value):
    with pytest.raises(AnsibleFilterError) as err:
        mod.artifact_store(value)
    assert str(err.value).startswith("dflash_controller_dir is not set: set it in the inventory")
    assert "stage_artifacts_dir" in str(err.value) and "\n" not in str(err.value)


def test_no_role_default_derives_from_the_playbook_directory():
    repo = Path(__file__).resolve().parents[4]
    files = [*repo.glob("roles/*/defaults/*.yml"), *repo.glob("playbooks/**/*.yml")]

    def code(path):
        return [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    offenders = [str(p.relative_to(repo)) for p in files if any("playbook_dir" in line for line in code(p))]
    assert offenders == []


def test_the_run_scratch_is_under_ansibles_own_temporary_directory_of_the_run():
    assert mod.run_scratch("dflash_overlay") == f"{mod.C.DEFAULT_LOCAL_TMP}/dflash-dflash_overlay"
    assert mod.run_scratch("store") == mod.run_scratch("store")


@pytest.mark.parametrize("name", ["", None, "a/b", "..", "../x", "a b"])
def test_a_run_scratch_name_is_a_plain_name(name):
    with pytest.raises(AnsibleFilterError, match="is not a plain name"):
        mod.run_scratch(name)
