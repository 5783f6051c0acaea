"""site_packages_transplant's converged re-run from a bundle (issue 25): answered from the last run's record,
and every change the full path would act on still taken to the full path, which repairs it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import test_site_packages_transplant as base
import test_transplant_decisions as decisions
from transplant_support import add_dist, record_state, run_module, site_packages, snapshot

REMOVE = ["nvidia-cuda-runtime-cu12"]
venvs = base.venvs  # the same src/dest pair


@pytest.fixture
def converged(venvs, tmp_path):
    """A bundle of torch + nvidia-* and a destination it was transplanted into (the record written)."""
    src, dest = venvs
    bundle = tmp_path / "torch-cu130.tar"
    rc, result = run_module({"state": "packed", "src": str(src), "bundle": str(bundle),
                             "distributions": ["torch", "nvidia-*"]})
    assert rc == 0, result
    args = {"bundle": str(bundle), "dest": str(dest), "remove": REMOVE}
    rc, result = run_module(args)
    assert rc == 0 and result["changed"] is True and result["fast_path"] is False, result
    assert (dest / ".dflash-release" / "transplant.json").is_file()
    return {"src": src, "dest": dest, "bundle": bundle, "args": args, "first": result}


def _rerun(args, **kw):
    rc, result = run_module(args, **kw)
    assert rc == 0, result
    return result


def _repaired(world, result):
    """The run took the full path and changed the destination back; the next run is answered from the record."""
    assert result["fast_path"] is False and result["changed"] is True, result
    assert record_state(world["dest"])["problems"] == []
    again = _rerun(world["args"])
    assert again["changed"] is False and again["fast_path"] is True, again


def test_converged_rerun_reports_unchanged_without_reading_the_bundle(converged, tmp_path):
    result, opened = decisions._run_counting_opens(converged["args"], tmp_path)
    assert result["changed"] is False and result["fast_path"] is True
    sp = str(site_packages(converged["dest"]))
    assert str(converged["bundle"]) not in opened and os.path.realpath(converged["bundle"]) not in opened
    assert [p for p in opened if p.startswith(sp + "/")] == []  # no RECORD, no METADATA, no payload file
    assert str(converged["dest"] / ".dflash-release" / "transplant.json") in opened  # the hook saw the reads
    assert result["unchanged"] == [{"name": "nvidia-cublas", "version": "13.1.0"},
                                   {"name": "nvidia-cuda-runtime", "version": "13.0.96"},
                                   {"name": "torch", "version": "2.11.0+cu130"}]
    assert result["moved"] == [] and result["removed"] == [] and result["files_copied"] == 0
    assert result["plan"] == {"files_to_write": 0, "bytes_to_write": 0, "files_to_delete": 0,
                              "dist_info_to_remove": 0, "files_kept_shared": 0}


def test_the_fast_answer_is_the_full_paths_answer(converged):
    """The same fields and values as the full path's no-change answer, but for fast_path and elapsed."""
    fast = _rerun(converged["args"], diff=True)
    (converged["dest"] / ".dflash-release" / "transplant.json").unlink()
    full = _rerun(converged["args"], diff=True)
    assert fast["fast_path"] is True and full["fast_path"] is False
    for result in (fast, full):
        for key in ("elapsed", "fast_path", "invocation"):
            result.pop(key, None)
    assert fast == full
    assert fast["diff"]["before"] == fast["diff"]["after"] == ""


def test_a_hand_edited_file_same_size_is_restored(converged):
    target = site_packages(converged["dest"]) / "torch" / "nn" / "__init__.py"
    data = target.read_bytes()
    target.write_bytes(b"X" * len(data))
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 5_000_000_000))
    result = _rerun(converged["args"])
    assert [m["name"] for m in result["moved"]] == ["torch"]
    assert target.read_bytes() == data
    _repaired(converged, result)


def test_a_deleted_file_is_restored(converged):
    target = site_packages(converged["dest"]) / "nvidia" / "cu13" / "lib" / "libcublas.so.13"
    target.unlink()
    result = _rerun(converged["args"])
    assert [m["name"] for m in result["moved"]] == ["nvidia-cublas"]
    assert target.read_bytes() == b"cublas13" * 1000
    _repaired(converged, result)


def test_a_tampered_file_of_another_size_is_restored(converged):
    target = site_packages(converged["dest"]) / "torch" / "lib" / "libtorch_cuda.so"
    mtime = target.stat().st_mtime_ns
    with open(target, "ab") as handle:
        handle.write(b"EVIL")
    os.utime(target, ns=(mtime, mtime))  # the old mtime put back: the size still tells
    result = _rerun(converged["args"])
    assert [m["name"] for m in result["moved"]] == ["torch"]
    assert not target.read_bytes().endswith(b"EVIL")
    _repaired(converged, result)


def test_a_different_bundle_at_the_same_path_is_transplanted(converged, tmp_path):
    src2 = tmp_path / "src2"
    shutil.copytree(converged["src"], src2, symlinks=True)
    for dist_info in site_packages(src2).glob("torch-*.dist-info"):
        shutil.rmtree(dist_info)
    add_dist(src2, "torch", "2.11.1+cu130", {"torch/__init__.py": b"VERSION = '2.11.1'\n"}, tag=base.TAG)
    rc, packed = run_module({"state": "packed", "src": str(src2), "bundle": str(converged["bundle"]),
                             "distributions": ["torch", "nvidia-*"]})
    assert rc == 0 and packed["changed"] is True, packed
    result = _rerun(converged["args"])
    assert result["moved"] == [{"name": "torch", "from": "2.11.0+cu130", "to": "2.11.1+cu130"}]
    assert record_state(converged["dest"])["dists"]["torch"] == "2.11.1+cu130"
    _repaired(converged, result)


def test_the_same_bundle_copied_anew_is_checked_in_full_once(converged):
    """A bundle file replaced by a byte-identical copy: not the file the record names, so the full path
    answers (nothing to do) and records it; the run after is answered from the record again."""
    bundle = converged["bundle"]
    copy = bundle.with_name("copy.tar")
    shutil.copyfile(bundle, copy)
    os.replace(copy, bundle)
    result = _rerun(converged["args"])
    assert result["changed"] is False and result["fast_path"] is False
    assert _rerun(converged["args"])["fast_path"] is True


def test_a_changed_remove_list_is_acted_on(converged):
    result = _rerun(dict(converged["args"], remove=["nvidia-*-cu12"]))
    assert result["removed"] == [{"name": "nvidia-nccl-cu12", "version": "2.27.3"}]
    assert result["fast_path"] is False and result["changed"] is True
    assert "nvidia-nccl-cu12" not in record_state(converged["dest"])["dists"]
    again = _rerun(dict(converged["args"], remove=["nvidia-*-cu12"]))
    assert again["changed"] is False and again["fast_path"] is True


def test_a_distribution_that_remove_names_appearing_again_is_removed(converged):
    add_dist(converged["dest"], "nvidia-cuda-runtime-cu12", "12.8.90",
             {"nvidia/cuda_runtime/lib/libcudart.so.12": b"cudart12"})
    result = _rerun(converged["args"])
    assert result["removed"] == [{"name": "nvidia-cuda-runtime-cu12", "version": "12.8.90"}]
    _repaired(converged, result)


def test_check_mode_tells_the_truth_both_ways(converged):
    result = _rerun(converged["args"], check=True, diff=True)
    assert result["changed"] is False and result["fast_path"] is True and result["diff"]["after"] == ""
    target = site_packages(converged["dest"]) / "torch" / "_C.py"
    target.unlink()
    before = snapshot(converged["dest"])
    result = _rerun(converged["args"], check=True, diff=True)
    assert result["changed"] is True and result["fast_path"] is False
    assert result["diff"]["after"] == "torch==2.11.0+cu130\n"
    assert snapshot(converged["dest"]) == before  # check mode neither repairs nor records


def test_a_source_venv_run_never_takes_the_record(converged):
    """The record is of a bundle run: a run from a venv decides from that venv, as before."""
    args = base._args(converged["src"], converged["dest"])
    assert _rerun(args)["fast_path"] is False


def test_a_run_that_changes_the_destination_forgets_the_record(converged):
    record = converged["dest"] / ".dflash-release" / "transplant.json"
    result = _rerun({"dest": str(converged["dest"]), "remove": ["requests"]})
    assert result["changed"] is True and not record.exists()
    assert _rerun(converged["args"])["fast_path"] is False  # and the next bundle run records again
    assert record.exists() and _rerun(converged["args"])["fast_path"] is True


def test_an_unreadable_record_is_a_miss_not_a_failure(converged):
    record = converged["dest"] / ".dflash-release" / "transplant.json"
    for text in ("{not json", json.dumps({"format": "dflash-transplant-converged", "version": 1}), "[]"):
        record.write_text(text)
        result = _rerun(converged["args"])
        assert result["changed"] is False and result["fast_path"] is False, text
    assert json.loads(record.read_text())["format"] == "dflash-transplant-converged"  # written again


def test_a_linked_record_directory_is_never_written_through(converged):
    meta = converged["dest"] / ".dflash-release"
    shutil.rmtree(meta)
    meta.symlink_to(Path(converged["dest"]).parent)  # a link is never written through
    result = _rerun(converged["args"])
    assert result["changed"] is False and result["fast_path"] is False
    assert not (Path(converged["dest"]).parent / "transplant.json").exists()
