"""elfload/loadplan.py: which GPUs load which sgl_kernel library, and which features name which library."""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.module_utils.elfload import loadplan as L


def test_sm90_library_is_loaded_by_hopper_only_and_sm100_by_the_rest():
    ccs = [(9, 0), (12, 0), (10, 0)]
    assert L.classify("sgl_kernel", "sm90/common_ops.abi3.so", ccs) == ("import", False, [(9, 0)])
    assert L.classify("sgl_kernel", "sm100/common_ops.abi3.so", ccs) == ("import", False, [(12, 0), (10, 0)])
    assert L.classify("sgl_kernel", "sm100/common_ops.abi3.so", None) == ("import", False, None)


def test_a_common_ops_outside_an_sm_directory_is_an_ordinary_library():
    load, _required, _gpus = L.classify("sgl_kernel", "common_ops.abi3.so", [(9, 0)])
    assert load == "import"


def test_unknown_features_are_named_and_known_ones_map_to_their_library():
    assert L.unknown_features(["fa3", " FlashMLA ", "bogus"]) == ["bogus"]
    assert L.unknown_features(None) == []
    assert L.required_libraries(["FA3", "spatial"]) == {"flash_ops", "spatial_ops"}
    assert L.classify("sgl_kernel", "flash_ops.abi3.so", [(12, 0)], features=["fa3"])[:2] == ("lazy", True)
