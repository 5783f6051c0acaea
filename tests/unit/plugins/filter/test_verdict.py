"""release_findings: "verified" as docs/architecture.md defines it, on pkg_probe/abi_check result shapes."""
from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "dflash_verdict_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "verdict.py")
verdict = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verdict)

SUPERSEDED = [{"distribution": "sglang", "requirement": r}
              for r in ("sgl-kernel", "torch", "flashinfer-python", "flashinfer-cubin")]
REQUIREMENTS = ["sglang-kernel>=0.4.2", "flashinfer-python==0.6.8.post1", "flashinfer-cubin==0.6.8.post1"]

# What pkg_probe reports for the known-good stack (the lab's ct129 venv).
GOOD = {
    "distributions": {
        "torch": {"name": "torch", "version": "2.11.0+cu130"},
        "sglang": {"name": "sglang", "version": "0.5.9"},
        "sglang-kernel": {"name": "sglang-kernel", "version": "0.4.2"},
        "flashinfer-python": {"name": "flashinfer-python", "version": "0.6.8.post1"},
        "flashinfer-cubin": {"name": "flashinfer-cubin", "version": "0.6.8.post1"},
    },
    "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "cuda_major": 13},
    "import_owners": {},
    "unsatisfied": [
        {"distribution": "sglang", "version": "0.5.9", "requirement": "sgl-kernel==0.3.21",
         "installed": None, "problem": "missing"},
        {"distribution": "sglang", "version": "0.5.9", "requirement": "torch==2.9.1",
         "installed": "2.11.0+cu130", "problem": "conflict"},
        {"distribution": "sglang", "version": "0.5.9", "requirement": "flashinfer_python==0.6.3",
         "installed": "0.6.8.post1", "problem": "conflict"},
    ],
    "imports": {"torch": {"ok": True}, "sgl_kernel": {"ok": True}},
}


def findings(probe, abi=None, requirements=None):
    return verdict.release_findings(probe, list(abi or []), SUPERSEDED, requirements or REQUIREMENTS, 13)


def test_the_known_good_stack_is_verified():
    assert findings(GOOD, abi=[{"item": {"name": "main"}, "compatible": True}]) == []


def test_the_incidents_ct200_fails_with_the_root_causes_first():
    bad = copy.deepcopy(GOOD)
    bad["distributions"]["sgl-kernel"] = {"name": "sgl-kernel", "version": "0.3.21"}
    bad["import_owners"] = {"sgl_kernel": ["sglang-kernel", "sgl-kernel"]}
    bad["torch"] = {"version": "2.11.0+cu128", "cuda": "12.8", "cuda_major": 12}
    out = findings(bad)
    assert out[0] == ("import name sgl_kernel is owned by sgl-kernel and sglang-kernel "
                      "(kernel_pin removes the look-alike)")
    assert out[1] == ("torch 2.11.0+cu128 is built for CUDA 12.8; the DFlash stack needs CUDA 13 (cuda_overlay)")
    assert len(out) == 2


def test_pypi_kernel_in_place_of_sglang_kernel_is_named():
    bad = copy.deepcopy(GOOD)
    del bad["distributions"]["sglang-kernel"]
    bad["distributions"]["sgl-kernel"] = {"name": "sgl-kernel", "version": "0.3.21"}
    out = findings(bad)
    assert out == ["the DFlash sources need sglang-kernel>=0.4.2: sglang-kernel is not installed; sgl-kernel 0.3.21 "
                   "is installed and also provides sgl_kernel (kernel_pin)"]


def test_versions_compare_without_the_local_tag_and_by_specifier():
    probe = copy.deepcopy(GOOD)
    assert findings(probe, requirements=["torch==2.11.0", "sglang-kernel>=0.4.2,<0.5"]) == []
    probe["distributions"]["flashinfer-python"]["version"] = "0.6.3"
    assert findings(probe) == ["the DFlash sources need flashinfer-python==0.6.8.post1: flashinfer-python 0.6.3 "
                               "is installed"]


def test_only_declared_requirements_are_superseded():
    probe = copy.deepcopy(GOOD)
    probe["unsatisfied"].append({"distribution": "sglang", "version": "0.5.9", "requirement": "uvicorn>=0.30",
                                 "installed": None, "problem": "missing"})
    probe["unsatisfied"].append({"distribution": "flashinfer-python", "version": "0.6.8.post1",
                                 "requirement": "torch==2.9.1", "installed": "2.11.0+cu130", "problem": "conflict"})
    out = findings(probe)
    assert out == ["sglang 0.5.9 requires uvicorn>=0.30: not installed (missing)",
                   "flashinfer-python 0.6.8.post1 requires torch==2.9.1: installed 2.11.0+cu130 (conflict)"]


def test_abi_check_and_imports_are_reported_per_instance():
    probe = copy.deepcopy(GOOD)
    probe["imports"]["sgl_kernel"] = {"ok": False, "error": "ImportError: libcudart.so.13: cannot open shared object"}
    abi = [{"item": {"name": "main"}, "compatible": True},
           {"item": {"name": "gpu2"}, "compatible": False,
            "msg": "sgl_kernel/common_ops.abi3.so has no code for SM 120"}]
    out = findings(probe, abi=abi)
    assert out == ["abi_check (gpu2): sgl_kernel/common_ops.abi3.so has no code for SM 120",
                   "import sgl_kernel failed: ImportError: libcudart.so.13: cannot open shared object"]


def test_a_failed_probe_is_the_only_finding():
    assert findings({"failed": True, "msg": "no interpreter at /opt/dflash/releases/x/bin/python"}) == [
        "pkg_probe failed: no interpreter at /opt/dflash/releases/x/bin/python"]


def test_compatible_release_extras_and_markers_are_read_as_pep_508():
    """What the Jinja copy of the verdict (a regex over name, one operator, one version) got wrong."""
    probe = copy.deepcopy(GOOD)
    assert findings(probe, requirements=["sglang-kernel~=0.4.0", "flashinfer-python[cubin]>=0.6.8,<0.7",
                                         'torch==2.11.0; sys_platform == "linux"']) == []
    assert findings(probe, requirements=["sglang-kernel~=0.5.0"]) == [
        "the DFlash sources need sglang-kernel~=0.5.0: sglang-kernel 0.4.2 is installed"]
    # a superseded requirement is matched by its normalised name, whatever its extras, marker or spelling
    probe["unsatisfied"].append({"distribution": "sglang", "version": "0.5.9",
                                 "requirement": 'Flashinfer_Cubin[x]==0.6.3; extra == "all"',
                                 "installed": "0.6.8.post1", "problem": "conflict"})
    assert findings(probe) == []


# verification_inputs: what a verdict depends on besides the files (the marker records its digest).
_GPUS = {"driver_version": "580.95.05", "gpus": [
    {"index": 0, "uuid": "GPU-a", "name": "RTX PRO 6000", "compute_capability": "12.0", "memory_used_mib": 10},
    {"index": 1, "uuid": "GPU-b", "name": "RTX PRO 6000", "compute_capability": "12.0", "memory_used_mib": 0}]}
_INST = [{"name": "qwen3-8b", "port": 30001, "api_key": "sk-secret", "gpus": [1], "attention_backend": "fa3",
          "features": [], "environment": {}}]


def test_verification_inputs_name_the_assigned_cards_and_not_the_secrets():
    got = verdict.verification_inputs(_INST, _GPUS, {"imports": ["torch"]})
    assert got["cards"] == [{"index": 1, "uuid": "GPU-b", "name": "RTX PRO 6000", "compute_capability": "12.0"}]
    assert got["driver_version"] == "580.95.05" and got["checks"] == {"imports": ["torch"]}
    assert "sk-secret" not in repr(got) and "30001" not in repr(got)


def test_verification_inputs_change_with_what_verification_depends_on():
    base = verdict.verification_inputs(_INST, _GPUS, {"imports": ["torch"]})
    swapped = copy.deepcopy(_GPUS)
    swapped["gpus"][1]["uuid"] = "GPU-c"          # another card behind the same index
    other_backend = [dict(_INST[0], attention_backend="flashinfer")]
    newer_driver = dict(_GPUS, driver_version="590.10")
    for changed in (verdict.verification_inputs(_INST, swapped, {"imports": ["torch"]}),
                    verdict.verification_inputs(other_backend, _GPUS, {"imports": ["torch"]}),
                    verdict.verification_inputs(_INST, newer_driver, {"imports": ["torch"]}),
                    verdict.verification_inputs(_INST, _GPUS, {"imports": ["torch", "sglang"]})):
        assert changed != base
    busy = copy.deepcopy(_GPUS)
    busy["gpus"][1]["memory_used_mib"] = 90000     # the server's own memory use is no input
    assert verdict.verification_inputs(_INST, busy, {"imports": ["torch"]}) == base


def test_without_a_gpu_list_the_inputs_are_unknown():
    assert verdict.verification_inputs(_INST, {}, {}) is None
    assert verdict.verification_inputs(_INST, {"gpus": []}, {}) is None


WORKERS = {"DFLASH": "sglang.srt.speculative.dflash_worker", "DDTREE": "sglang.srt.speculative.ddtree_worker",
           "EAGLE": "sglang.srt.speculative.eagle_worker", "EAGLE3": "sglang.srt.speculative.eagle_worker"}


def test_the_import_list_is_the_given_modules_then_each_present_instances_worker_once():
    base = ["torch", "sgl_kernel", "sglang.launch_server"]
    instances = [{"name": "a", "speculative_algorithm": "DFLASH"}, {"name": "b", "speculative_algorithm": "dflash"},
                 {"name": "c", "speculative_algorithm": "eagle3"}, {"name": "d", "speculative_algorithm": "EAGLE"},
                 {"name": "e", "speculative_algorithm": ""}, {"name": "f"},
                 {"name": "g", "speculative_algorithm": "NGRAM"}]
    assert verdict.verify_imports(base, WORKERS, instances) == [
        "torch", "sgl_kernel", "sglang.launch_server", "sglang.srt.speculative.dflash_worker",
        "sglang.srt.speculative.eagle_worker"]
    # an operator's own list keeps its order and gets the workers too; a module named twice is imported once
    assert verdict.verify_imports(["json", "torch", "json"], WORKERS, instances[:1]) == [
        "json", "torch", "sglang.srt.speculative.dflash_worker"]
    assert verdict.verify_imports([], WORKERS, []) == []
    assert verdict.verify_imports(base, {}, instances) == base


def test_the_role_default_is_the_start_up_closure_and_the_role_adds_the_workers():
    """The list is a plain default (argument_specs checks it); the workers are added by the filter."""
    import yaml
    root = Path(__file__).resolve().parents[4] / "roles" / "sglang_service"
    defaults = yaml.safe_load((root / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((root / "meta" / "argument_specs.yml").read_text())
    assert defaults["sglang_service_verify_imports"] == spec["argument_specs"]["main"]["options"][
        "sglang_service_verify_imports"]["default"]
    assert "sglang.srt.models.registry" in defaults["sglang_service_verify_imports"]
    assert "verify_imports(sglang_service_verify_workers" in defaults["_sglang_service_imports"]
    verify = (root / "tasks" / "verify_release.yml").read_text()
    assert 'imports: "{{ _sglang_service_imports }}"' in verify


def test_the_verified_marker_names_the_fingerprint_inputs_torch_and_each_distribution_in_jinjas_order():
    probe = {"torch": {"version": "2.11.0+cu130"},
             "distributions": {"torch": {"name": "torch", "version": "2.11.0+cu130"},
                               "sglang": {"name": "sglang", "version": "0.5.11"},
                               "Jinja2": {"name": "Jinja2", "version": "3.1.6"},
                               "PyYAML": {"name": "PyYAML", "version": "6.0.3"},
                               "aiohttp": {"name": "aiohttp", "version": "3.14.3"}}}
    fingerprint = {"sha256": "ab" * 32, "files": 5210}
    assert verdict.verified_record(probe, fingerprint, "38daf6d080f8bba8", "cd" * 32) == {
        "release_id": "38daf6d080f8bba8", "fingerprint": "ab" * 32, "files": 5210, "inputs": "cd" * 32,
        "torch": "2.11.0+cu130",
        # case-insensitive, as Jinja's sort wrote the markers before this filter
        "distributions": ["aiohttp==3.14.3", "Jinja2==3.1.6", "PyYAML==6.0.3", "sglang==0.5.11",
                          "torch==2.11.0+cu130"]}
    # a release without torch, and a probe that read no distribution
    assert verdict.verified_record({}, fingerprint, "r", "d") == {
        "release_id": "r", "fingerprint": "ab" * 32, "files": 5210, "inputs": "d", "torch": None, "distributions": []}
