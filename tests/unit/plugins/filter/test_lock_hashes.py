"""lock_hashes / lock_hash_errors: the lock pins every package by sha256, and the same name and version
must be the bytes a known source recorded."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "dflash_lock_hashes_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "lock_hashes.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)

A = "a" * 64
B = "b" * 64
C = "c" * 64

# uv pip compile --no-header --generate-hashes output, as sglang_venv's package_lock.yml keeps it.
LOCK = f"""\
flashinfer-python==0.6.8.post1 \\
    --hash=sha256:{A}
    # via sglang
sglang==0.5.11 \\
    --hash=sha256:{B}
Torch==2.11.0+cu130 \\
    --hash=sha256:{C.upper()} \\
    --hash=sha256:{A}
    # via
    #   sglang
    #   flashinfer-python
"""


def test_lock_hashes_reads_uvs_output_with_normalized_names():
    assert mod.lock_hashes(LOCK) == {
        "flashinfer-python==0.6.8.post1": [A],
        "sglang==0.5.11": [B],
        "torch==2.11.0+cu130": sorted([A, C]),
    }


def test_a_pin_without_hash_and_option_lines():
    text = "--index-url http://x/simple\nfoo_bar==1.0\n    # via baz\nsglang[all]==0.5.9 \\\n    --hash=sha256:" + A
    assert mod.lock_hashes(text) == {"foo-bar==1.0": [], "sglang==0.5.9": [A]}
    assert mod.lock_hashes("") == {} and mod.lock_hashes(None) == {}


def test_a_lock_of_hashes_with_nothing_known_is_accepted():
    assert mod.lock_hash_errors(LOCK, [], []) == []


def test_a_package_without_sha256_is_refused_by_name():
    errors = mod.lock_hash_errors("sglang==0.5.11\n", [], [])
    assert len(errors) == 1
    assert errors[0].startswith("sglang==0.5.11 has no sha256 in the lock")


def test_other_bytes_under_a_known_name_and_version_are_refused_naming_the_wheel():
    tampered = LOCK.replace(f"sglang==0.5.11 \\\n    --hash=sha256:{B}", f"sglang==0.5.11 \\\n    --hash=sha256:{C}")
    known = [{"source": "release 5c1e0a9b3d2f4e61", "lock": LOCK}]
    errors = mod.lock_hash_errors(tampered, known, ["/opt/dflash/artifacts/wheelhouse/sglang-0.5.11-py3-none-any.whl",
                                                    "/opt/dflash/artifacts/wheelhouse/sglang-0.5.9-py3-none-any.whl"])
    assert errors == [
        f"wheel sglang-0.5.11-py3-none-any.whl (sglang==0.5.11) is sha256 {C[:16]}…, but release 5c1e0a9b3d2f4e61 "
        f"recorded sha256 {B[:16]}… for the same name and version: sha256 {C} is in no record, and bytes no record "
        "vouches for are refused, beside recorded ones too (uv pip sync installs the most specific file the lock "
        "lists): remove or replace the file, or take it on purpose with sglang_venv_accept_new_hashes=true or by "
        "adding it to sglang_venv_pinned_hashes['sglang==0.5.11']"]
    assert "\n" not in errors[0]


def test_a_hash_added_beside_the_recorded_ones_is_refused_naming_it():
    """Round 3 N3: an index that adds a file to a recorded version makes uv's lock list both hashes, and
    uv pip sync installs the more specific (added) file; the recorded hash still being there is no excuse."""
    grown = LOCK.replace(f"--hash=sha256:{B}", f"--hash=sha256:{B} \\\n    --hash=sha256:{C}")
    assert mod.lock_hashes(grown)["sglang==0.5.11"] == [B, C]
    errors = mod.lock_hash_errors(grown, [{"source": "release 1", "lock": LOCK}], [])
    assert len(errors) == 1 and "\n" not in errors[0]
    assert errors[0].startswith(f"sglang==0.5.11 is sha256 {B[:16]}…, {C[:16]}…, but release 1 recorded sha256 "
                                f"{B[:16]}… for the same name and version: sha256 {C} is in no record")
    assert B not in errors[0]  # only the unknown hash is named in full
    assert "sglang_venv_accept_new_hashes=true" in errors[0]
    assert "sglang_venv_pinned_hashes['sglang==0.5.11']" in errors[0]
    # vouched for by another source (a second release, or the pins): every hash is known, so it passes
    for other in ({"source": "release 2", "lock": grown}, {"source": "p", "hashes": {"sglang==0.5.11": [C]}}):
        assert mod.lock_hash_errors(grown, [{"source": "release 1", "lock": LOCK}, other], []) == []


def test_fewer_hashes_new_versions_and_old_locks_without_hashes_pass():
    fewer = LOCK.replace(f"--hash=sha256:{C.upper()} \\\n    ", "")  # torch with one of its two files
    assert mod.lock_hashes(fewer)["torch==2.11.0+cu130"] == [A]
    upgraded = LOCK.replace("sglang==0.5.11", "sglang==0.5.12")
    old = [{"source": "release old", "lock": "sglang==0.5.11\ntorch==2.11.0+cu130\n"}]
    known = [{"source": "release 1", "lock": LOCK}]
    assert mod.lock_hash_errors(fewer, known, []) == []
    assert mod.lock_hash_errors(upgraded.replace(B, C), known, []) == []
    assert mod.lock_hash_errors(LOCK.replace(B, C), old, []) == []


def test_pinned_hashes_are_known_before_any_release_and_merge_with_releases():
    pinned = {"source": "sglang_venv_pinned_hashes", "hashes": {"SGLang==0.5.11": ["sha256:" + C.upper()]}}
    errors = mod.lock_hash_errors(LOCK, [pinned], [])
    assert len(errors) == 1 and "sglang==0.5.11 is sha256" in errors[0]
    assert "but sglang_venv_pinned_hashes recorded" in errors[0]
    both = [pinned, {"source": "release 1", "lock": LOCK.replace(B, A)}]
    errors = mod.lock_hash_errors(LOCK, both, [])
    assert "but sglang_venv_pinned_hashes and release 1 recorded" in errors[0]
    assert mod.lock_hash_errors(LOCK, [{"source": "x", "hashes": {"sglang==0.5.11": B}}], []) == []
    # a pin is the whole set: the index's added file is refused also before any release
    grown = LOCK.replace(f"--hash=sha256:{B}", f"--hash=sha256:{B} \\\n    --hash=sha256:{C}")
    errors = mod.lock_hash_errors(grown, [{"source": "sglang_venv_pinned_hashes", "hashes": {"sglang==0.5.11": [B]}}])
    assert len(errors) == 1 and f"sha256 {C} is in no record" in errors[0]
    assert "but sglang_venv_pinned_hashes recorded" in errors[0]


def test_wheel_file_names():
    assert mod._wheel_key("torch-2.11.0+cu130-cp311-cp311-linux_x86_64.whl") == "torch==2.11.0+cu130"
    assert mod._wheel_key("flashinfer_python-0.6.8.post1-py3-none-any.whl") == "flashinfer-python==0.6.8.post1"
    assert mod._wheel_key("foo-1.0-1-py3-none-any.whl") == "foo==1.0"
    assert mod._wheel_key("Foo.Bar-2.0.tar.gz") == "foo-bar==2.0"
    assert mod._wheel_key("README") is None and mod._wheel_key("bad.whl") is None


def _record(path, data):
    """One entry of releases_info's "built" list."""
    import json
    return {"path": path, "text": json.dumps(data)}


def test_built_locks_reads_each_release_s_built_json_and_skips_what_it_cannot():
    results = [
        _record("/opt/dflash/releases/5c1e/.dflash-release/built.json",
                {"release_id": "5c1e", "spec": {"lock": LOCK}}),
        # no release_id: named by its release directory; no spec: an empty lock
        _record("/opt/dflash/releases/77aa/.dflash-release/built.json", {}),
        {"path": "/opt/dflash/releases/dead/.dflash-release/built.json", "text": None},  # unreadable
        {"path": "/opt/dflash/releases/bad/.dflash-release/built.json", "text": "not json"},
        {"path": "/opt/dflash/releases/list/.dflash-release/built.json", "text": "[1, 2]"},
        "not a record",
    ]
    assert mod.built_locks(results) == [{"source": "release 5c1e", "lock": LOCK},
                                        {"source": "release 77aa", "lock": ""}]
    assert mod.built_locks(None) == []
    # what lock_hash_errors then makes of it: the recorded bytes are known, other bytes are not
    assert mod.lock_hash_errors(LOCK, mod.built_locks(results[:1])) == []
    assert mod.lock_hash_errors(LOCK.replace(B, C), mod.built_locks(results[:1])) != []
