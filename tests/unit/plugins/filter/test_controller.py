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
    assert "or set dflash_artifact_store_host to an inventory host that keeps them" in str(err.value)
    assert str(err.value).endswith(", or set stage_artifacts_dir") and "\n" not in str(err.value)


def test_a_run_with_nowhere_to_keep_the_artifacts_is_one_line_naming_both_places():
    msg = mod.controller_dir_refusal("")
    assert msg == ("dflash_controller_dir is not set: set it in the inventory to a controller directory that keeps the "
                   "staged artifacts and survives the run, or set dflash_artifact_store_host to an inventory host that "
                   "keeps them (a controller that keeps nothing, as an AWX job's)")
    assert mod.controller_dir_refusal("  ", None) == msg
    assert mod.controller_dir_refusal("/srv/dflash") == ""
    assert mod.controller_dir_refusal("", "ct129") == ""            # the artifact store host keeps them


class HostVars(dict):
    """hostvars as a filter sees it: a mapping of inventory hosts to their variables."""


def test_a_reference_setting_is_read_from_the_reference_hosts_own_variables():
    hv = HostVars(ct129={"dflash_reference_venv": "/srv/venvs/known-good", "stage_artifacts_reference_venv": "/old"},
                  ct200={"dflash_reference_venv": "/wrong/target/value"})
    names = ["dflash_reference_venv", "stage_artifacts_reference_venv"]
    assert mod.reference_var(hv, "ct129", names, "/root/venv_sglang211") == "/srv/venvs/known-good"
    hv["ct129"] = {"stage_artifacts_reference_venv": "/old"}          # its earlier name, still read
    assert mod.reference_var(hv, "ct129", names, "/root/venv_sglang211") == "/old"


@pytest.mark.parametrize("reference, own", [
    ("ct129", {}),                                   # the reference host sets nothing: the default
    ("ct129", {"dflash_reference_venv": ""}),        # nor an empty value
    ("ct129", {"dflash_reference_venv": None}),
    ("", {}),                                        # no reference host in the inventory
    ("ct130", {}),                                   # a name the inventory lacks
])
def test_the_default_only_when_the_reference_host_does_not_set_it(reference, own):
    hv = HostVars(ct129=own, ct200={"dflash_reference_venv": "/wrong/target/value"})
    assert mod.reference_var(hv, reference, "dflash_reference_venv", "/root/venv_sglang211") == "/root/venv_sglang211"


ARTIFACTS = "/srv/dflash/artifacts"


def test_what_is_missing_and_needed_is_staged_when_the_reference_answers():
    assert mod.stage_refusal(ARTIFACTS, ["bundle", "sources"], "ct129", True) == ""
    assert mod.stage_refusal(ARTIFACTS, [], "ct129", False) == ""      # nothing needed: the reference may be down
    assert mod.stage_refusal(ARTIFACTS, [], "", False) == ""


def test_a_reference_host_down_with_the_bundle_missing_is_one_line_naming_it_and_the_alternatives():
    msg = mod.stage_refusal(ARTIFACTS, ["bundle"], "ct129", False)
    assert msg == ("the reference host ct129 does not answer (down or unreachable) and the staged artifacts are "
                   "missing (no CUDA bundle cuda-cu130.tar in /srv/dflash/artifacts): start ct129 and run again (the "
                   "deploy stages them from it), or copy them into /srv/dflash/artifacts from a controller that has "
                   "them, or set dflash_artifact_store_host to a host that keeps them, or set "
                   "cuda_overlay_source=index")


def test_no_reference_host_with_the_sources_missing_names_the_group_and_upstream():
    msg = mod.stage_refusal(ARTIFACTS, ["bundle", "sources"], "", False, "cu.tar")
    assert msg.startswith("the inventory has no reference host (group dflash_reference) and the staged artifacts are "
                          "missing (no CUDA bundle cu.tar and DFlash sources dflash-src/ in /srv/dflash/artifacts): "
                          "add the reference host to group dflash_reference and run again, ")
    assert msg.endswith("or set cuda_overlay_source=index, or deploy with dflash_source=upstream")
    assert "\n" not in msg


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


def test_no_store_host_is_the_controllers_store():
    assert mod.store_host("", ["ct129", "ct200"]) == ""
    assert mod.store_host(None, []) == ""
    assert mod.store_host("ct129", ["ct129", "ct200"]) == "ct129"


def test_a_store_host_the_inventory_lacks_is_one_line_naming_the_variable():
    with pytest.raises(AnsibleFilterError) as err:
        mod.store_host("ct130", ["ct129", "ct200"], "cuda_overlay_store_host")
    assert str(err.value).startswith("cuda_overlay_store_host: ct130 is not a host in the inventory: add it")
    assert "\n" not in str(err.value)


STORE = ("ct129", "/opt/dflash/artifacts/store")


def test_a_store_that_holds_what_is_needed_refuses_nothing():
    assert mod.store_refusal(*STORE, ["bundle", "sources", "uv"], ["bundle", "sources", "uv"]) == ""
    assert mod.store_refusal(*STORE, [], None) == ""                       # nothing needed: a store host may be down
    assert mod.store_refusal("", "/x", ["bundle"], None) == ""            # no store host declared


def test_what_the_store_lacks_is_staged_when_the_reference_answers_or_the_controller_has_uv():
    assert mod.store_refusal(*STORE, ["bundle", "sources"], [], "ct129", True) == ""
    assert mod.store_refusal(*STORE, ["uv"], ["bundle"], "", False, uv_on_controller=True) == ""


def test_a_missing_artifact_with_the_reference_down_names_the_fix():
    msg = mod.store_refusal(*STORE, ["bundle", "uv"], ["uv"], "ct128", False)
    assert msg == ("the artifact store ct129:/opt/dflash/artifacts/store has no CUDA bundle (cuda-cu130.tar) and "
                   "the reference host ct128 does not answer: start the reference host and run "
                   "playbooks/stage_artifacts.yml, or set cuda_overlay_source=index")
    msg = mod.store_refusal(*STORE, ["sources"], [], "", False)
    assert ("has no DFlash sources (dflash-src.tar) and the inventory has no reference host "
            "(group dflash_reference)") in msg
    assert msg.endswith("or deploy with dflash_source=upstream")
    msg = mod.store_refusal(*STORE, ["uv"], [], "ct128", True)
    assert msg == ("the artifact store ct129:/opt/dflash/artifacts/store has no uv and the controller has no uv "
                   "(dflash_uv_path, or uv on its PATH): run playbooks/stage_artifacts.yml from a controller that "
                   "has uv, or set dflash_uv_path to push the controller's uv")


@pytest.mark.parametrize("reference, up, words", [
    ("ct129", False, "(dflash_artifact_store_host, also the reference host) does not answer: start ct129"),
    ("ct128", False, "does not answer and the reference host ct128 does not answer: start ct129"),
    ("ct128", True, "does not answer (the reference host ct128 answers, but a deploy takes the staged artifacts from "
                    "the declared store only): start ct129"),
    ("", False, "does not answer and the inventory has no reference host (group dflash_reference): start ct129"),
])
def test_a_store_host_that_does_not_answer_is_refused_in_one_line(reference, up, words):
    msg = mod.store_refusal(*STORE, ["bundle"], None, reference, up)
    assert msg.startswith("the artifact store host ct129 ") and words in msg, msg
    assert msg.endswith("or unset dflash_artifact_store_host to deploy from the controller's store "
                        "(dflash_controller_dir)")
    assert "\n" not in msg
