"""GPU identity: the card behind an nvidia-smi index is resolved once, recorded, and checked again."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "dflash_gpus_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "gpus.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)


def card(n, index=None, minor=None):
    return {"index": n if index is None else index, "minor": n if minor is None else minor,
            "uuid": f"GPU-b6000000-0200-4000-8000-00000000000{n}", "pci_bus_id": f"00000000:0{n + 1}:00.0"}


ALL = [card(0), card(1), card(2), card(3)]
# GPU 1 dropped off the bus: nvidia-smi renumbers the cards after it, their minors stay
SHIFTED = [card(0), card(2, index=1), card(3, index=2)]
INSTANCES = [{"name": "qwen3-8b", "gpus": [2]}, {"name": "probe", "gpus": [3]}]


def test_identities_name_the_card_and_its_node():
    ids = mod.gpu_identities(INSTANCES, SHIFTED)
    assert ids["qwen3-8b"] == [{"index": 2, "uuid": "GPU-b6000000-0200-4000-8000-000000000003",
                                "pci_bus_id": "00000000:04:00.0", "minor": 3}]
    assert ids["probe"] == []                      # index 3 is not listed any more: preflight refuses it


def test_the_record_round_trips():
    rec = mod.gpu_record(mod.gpu_identities(INSTANCES, ALL)["qwen3-8b"])
    assert rec == {"2": {"uuid": "GPU-b6000000-0200-4000-8000-000000000002", "pci_bus_id": "00000000:03:00.0",
                         "minor": 2}}
    assert mod.gpu_identity_errors(INSTANCES, ALL, {"qwen3-8b": rec}) == []


def test_an_index_that_now_names_another_card_is_refused_naming_both_and_where_the_card_went():
    rec = {"qwen3-8b": mod.gpu_record(mod.gpu_identities([{"name": "qwen3-8b", "gpus": [1]}], ALL)["qwen3-8b"])}
    errors = mod.gpu_identity_errors([{"name": "qwen3-8b", "gpus": [1]}], SHIFTED, rec)
    assert errors == [
        "instance qwen3-8b: GPU 1 is now GPU-b6000000-0200-4000-8000-000000000002 (00000000:03:00.0), not "
        "GPU-b6000000-0200-4000-8000-000000000001 (00000000:02:00.0) it was deployed on; that card is not listed "
        "any more (dead or gone from the bus), or set sglang_service_gpus_moved=true to move the instance to "
        "GPU-b6000000-0200-4000-8000-000000000002"]
    rec2 = {"qwen3-8b": mod.gpu_record(mod.gpu_identities(INSTANCES, ALL)["qwen3-8b"])}
    (error,) = mod.gpu_identity_errors(INSTANCES[:1], SHIFTED, rec2)
    assert "GPU 2 is now GPU-b6000000-0200-4000-8000-000000000003" in error
    assert "that card is now GPU 1: set gpus to the index of the card you mean" in error


def test_following_the_card_to_its_new_index_passes_and_so_does_an_accepted_move():
    rec = {"qwen3-8b": mod.gpu_record(mod.gpu_identities(INSTANCES, ALL)["qwen3-8b"])}
    assert mod.gpu_identity_errors([{"name": "qwen3-8b", "gpus": [1]}], SHIFTED, rec) == []
    assert mod.gpu_identity_errors(INSTANCES[:1], SHIFTED, rec, accept_moved=True) == []


def test_a_new_instance_or_a_new_index_has_nothing_to_compare():
    assert mod.gpu_identity_errors(INSTANCES, SHIFTED, {}) == []
    assert mod.gpu_identity_errors(INSTANCES, SHIFTED, None) == []


def test_an_unknown_minor_is_refused_even_without_a_record():
    gpus = [dict(card(0)), dict(card(1), minor=None)]
    assert mod.gpu_identity_errors([{"name": "a", "gpus": [1]}], gpus, {}) == [
        "instance a: GPU 1 (00000000:02:00.0) has no minor number in `nvidia-smi -q`: its /dev/nvidia node "
        "cannot be named for DeviceAllow="]
