"""instance_errors: each mistake in an instance list named in one phrase that says what to change."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "dflash_instances_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "instances.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)


def inst(name, gpus, port, **kw):
    return {"name": name, "gpus": gpus, "port": port, "model_path": "/srv/models/Qwen3-8B",
            "served_model_name": name, **kw}


def test_a_sound_list_has_no_errors():
    assert mod.instance_errors([inst("a", [1], 30001), inst("b", [2], 30002)]) == []


def test_shared_port_and_gpu_are_named_with_their_instances():
    errors = mod.instance_errors([inst("a", [1], 30001), inst("b", [1, 2], 30001)])
    assert errors == ["port 30001 is assigned to a and b: give each instance its own port",
                      "GPU 1 is assigned to a and b: give each instance its own GPUs"]


def test_port_out_of_range_and_missing_keys():
    errors = mod.instance_errors([inst("a", [1], 70000), {"name": "b", "gpus": [2]}])
    assert "instance a: port 70000 is out of range (1-65535)" in errors
    assert "instance b: set model_path, served_model_name, port" in errors


def test_absent_instances_need_nothing_and_free_their_resources():
    assert mod.instance_errors([inst("a", [1], 30001), {"name": "b", "state": "absent", "port": 30001}]) == []


def test_names_and_states():
    errors = mod.instance_errors([inst("a b", [1], 30001), inst("c", [2], 30002, state="gone"),
                                  inst("c", [3], 30003)])
    assert errors[0] == "instance name c is used twice: names must be unique"
    assert "instance name 'a b': use letters, digits, '-' and '_' only" in errors
    assert "instance c: state 'gone' is not present or absent" in errors
