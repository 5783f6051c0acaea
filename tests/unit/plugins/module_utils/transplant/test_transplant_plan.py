"""transplant/plan.py: ownership-aware planning (no files change while planning)."""

from __future__ import annotations

import os

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import open_venv
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.plan import PlanError, build_plan
from ansible_collections.dflash.deploy.plugins.module_utils.transplant.source import VenvSource, rewrite_script
from transplant_support import CPTAG, add_dist, make_venv, snapshot


@pytest.fixture
def pair(tmp_path):
    src = make_venv(tmp_path / "src")
    dest = make_venv(tmp_path / "dest")
    return src, dest


def _plan(src, dest, patterns, remove=()):
    source = VenvSource(open_venv(str(src)))
    selected = source.load(patterns) if patterns else []
    return build_plan("run", source, selected, open_venv(str(dest)), remove)


def test_upgrade_plan(pair):
    src, dest = pair
    add_dist(src, "torch", "2.11.0+cu130", {"torch/__init__.py": b"130", "torch/lib/libtorch_cuda.so": b"new",
                                            "torch/only_new.py": b"n"})
    add_dist(dest, "torch", "2.11.0+cu128", {"torch/__init__.py": b"128", "torch/lib/libtorch_cuda.so": b"old",
                                             "torch/only_old.py": b"o"})
    before = snapshot(dest)
    plan = _plan(src, dest, ["torch"])
    assert snapshot(dest) == before
    assert plan.moved == [{"name": "torch", "from": "2.11.0+cu128", "to": "2.11.0+cu130",
                           "dist_info": "torch-2.11.0+cu130.dist-info",
                           "old_dist_infos": ["torch-2.11.0+cu128.dist-info"]}]
    assert sorted(w.path for w in plan.writes) == ["torch/__init__.py", "torch/lib/libtorch_cuda.so",
                                                   "torch/only_new.py"]
    assert {w.path: w.existed for w in plan.writes}["torch/only_new.py"] is False
    assert plan.deletes == ["torch/only_old.py"]
    assert plan.old_dist_infos == ["torch-2.11.0+cu128.dist-info"]
    info = plan.dist_info_writes[0]
    assert info.dist_info == "torch-2.11.0+cu130.dist-info" and not info.existed
    assert info.files[-1].path.endswith("/RECORD")  # RECORD is the last file written


def test_shared_files_of_leaving_dist_are_kept(pair):
    src, dest = pair
    shared = {"sgl_kernel/__init__.py": b"shared", "sgl_kernel/ops.py": b"ops"}
    add_dist(dest, "sgl-kernel", "0.3.21", dict(shared, **{"sgl_kernel/only_old.py": b"x"}))
    add_dist(dest, "sglang-kernel", "0.4.2", dict(shared, **{"sgl_kernel/only_new.py": b"y"}))
    plan = _plan(src, dest, [], remove=["sgl-kernel"])
    assert plan.removed == [{"name": "sgl-kernel", "version": "0.3.21", "dist_info": "sgl_kernel-0.3.21.dist-info"}]
    assert plan.deletes == ["sgl_kernel/only_old.py"]
    assert plan.kept_shared == ["sgl_kernel/__init__.py", "sgl_kernel/ops.py"]
    assert plan.writes == [] and plan.old_dist_infos == ["sgl_kernel-0.3.21.dist-info"]


def test_namespace_dir_shared_and_identical_files_allowed(pair):
    src, dest = pair
    add_dist(src, "nvidia-cuda-runtime", "13.0", {"nvidia/__init__.py": b"", "nvidia/cu13/lib/libcudart.so.13": b"13"})
    add_dist(src, "nvidia-cublas", "13.0", {"nvidia/__init__.py": b"", "nvidia/cu13/lib/libcublas.so.13": b"b13"})
    add_dist(dest, "nvidia-nccl-cu12", "2.0", {"nvidia/__init__.py": b"", "nvidia/nccl/lib/libnccl.so.2": b"n"})
    plan = _plan(src, dest, ["nvidia-*"])
    paths = sorted(w.path for w in plan.writes)
    assert paths == ["nvidia/__init__.py", "nvidia/cu13/lib/libcublas.so.13", "nvidia/cu13/lib/libcudart.so.13"]
    assert plan.deletes == []


def test_conflicting_content_with_staying_dist_refused(pair):
    src, dest = pair
    add_dist(src, "sglang-kernel", "0.4.2", {"sgl_kernel/__init__.py": b"new"})
    add_dist(dest, "sgl-kernel", "0.3.21", {"sgl_kernel/__init__.py": b"old"})
    with pytest.raises(PlanError, match="also claimed by sgl-kernel, which stays.*add sgl-kernel to remove"):
        _plan(src, dest, ["sglang-kernel"])
    plan = _plan(src, dest, ["sglang-kernel"], remove=["sgl-kernel"])
    assert [w.path for w in plan.writes] == ["sgl_kernel/__init__.py"] and plan.deletes == []


def test_moved_and_removed_refused(pair):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a"})
    add_dist(dest, "torch", "1", {"torch/a.py": b"b"})
    with pytest.raises(PlanError, match="^torch both moved and removed: drop it from one of distributions/remove$"):
        _plan(src, dest, ["torch"], remove=["tor*"])


def test_wrong_abi_refused(pair):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a"}, tag="cp39-cp39-manylinux_2_28_x86_64")
    with pytest.raises(PlanError, match="cp39-cp39.*CPython 3"):
        _plan(src, dest, ["torch"])


def test_unchanged_is_stat_only(pair, monkeypatch):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a" * 100}, tag=CPTAG + "-" + CPTAG + "-linux_x86_64",
             mtime=1_700_000_000)
    add_dist(dest, "torch", "2", {"torch/a.py": b"a" * 100}, mtime=1_700_000_000)
    import shutil
    # make the dest's dist-info match the source's byte for byte (as a finished transplant leaves it)
    for name in ("METADATA", "WHEEL", "INSTALLER", "RECORD"):
        s = next(src.glob("lib/python3.*/site-packages/torch-2.dist-info")) / name
        d = next(dest.glob("lib/python3.*/site-packages/torch-2.dist-info")) / name
        shutil.copy2(s, d)
    import ansible_collections.dflash.deploy.plugins.module_utils.pydist.record as record_mod
    import ansible_collections.dflash.deploy.plugins.module_utils.transplant.source as source_mod

    def no_hashing(*args, **kwargs):
        raise AssertionError("a no-op plan must not hash")
    # patched where it is looked up (transplant_source imports the name) as well as where it is defined
    monkeypatch.setattr(record_mod, "hash_file", no_hashing)
    monkeypatch.setattr(source_mod, "hash_file", no_hashing)
    plan = _plan(src, dest, ["torch"])
    assert not plan.has_work and plan.unchanged == [{"name": "torch", "version": "2"}]
    target = next(dest.glob("lib/python3.*/site-packages/torch/a.py"))
    # a size change alone (mtime kept) is noticed by stat and leads to a rewrite
    target.write_bytes(b"short")
    os.utime(target, ns=(1_700_000_000 * 10**9, 1_700_000_000 * 10**9))
    assert _plan(src, dest, ["torch"]).has_work
    # an mtime change alone (size kept) too
    target.write_bytes(b"b" * 100)
    assert _plan(src, dest, ["torch"]).has_work
    # both back as the source has them: stat-only, so unchanged again (contents are not compared)
    os.utime(target, ns=(1_700_000_000 * 10**9, 1_700_000_000 * 10**9))
    assert not _plan(src, dest, ["torch"]).has_work


@pytest.mark.parametrize("dest_version", ["1", "2"], ids=["older", "same_version_not_taken_as_unchanged"])
def test_dest_without_record_refused_when_leaving(pair, dest_version):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a"})
    add_dist(dest, "torch", dest_version, {"torch/a.py": b"a"}, write_record=False)
    with pytest.raises(PlanError, match="^destination torch %s has no RECORD: cannot tell which files are its own; "
                                        "reinstall it or remove it by hand$" % dest_version):
        _plan(src, dest, ["torch"])


def test_symlinked_dir_escape_refused(pair, tmp_path):
    src, dest = pair
    add_dist(src, "evil", "1", {"evil/x.py": b"x"})
    outside = tmp_path / "outside"
    outside.mkdir()
    sp = next(dest.glob("lib/python3.*/site-packages"))
    (sp / "evil").symlink_to(outside)
    with pytest.raises(PlanError, match="resolves outside the venv"):
        _plan(src, dest, ["evil"])


def test_rewrite_script():
    body = b"#!/old/venv/bin/python3\nimport sys\n"
    assert rewrite_script(body, ["/old/venv"], "/new/v") == b"#!/new/v/bin/python3\nimport sys\n"
    long_form = b"#!/bin/sh\n'''exec' '/old/venv/bin/python' \"$0\" \"$@\"\n' '''\nimport x\n"
    assert b"'/new/v/bin/python'" in rewrite_script(long_form, ["/old/venv"], "/new/v")
    assert rewrite_script(b"#!python\nx\n", [], "/new/v") == b"#!/new/v/bin/python\nx\n"
    assert rewrite_script(b"\x7fELF...", ["/old/venv"], "/new/v") == b"\x7fELF..."


def test_missing_directories_are_planned_parents_first(pair):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a", "torch/new/deep/x.py": b"x", "torch/new/y.py": b"y"})
    add_dist(dest, "torch", "1", {"torch/a.py": b"b"})
    plan = _plan(src, dest, ["torch"])
    sp = str(next(dest.glob("lib/python3.*/site-packages")))
    assert plan.new_dirs == [sp + "/torch/new", sp + "/torch/new/deep"]


def test_source_without_wheel_tags_is_moved_with_a_warning(pair):
    src, dest = pair
    di = add_dist(src, "torch", "2", {"torch/a.py": b"a"})
    (di / "WHEEL").write_bytes((di / "WHEEL").read_bytes().replace(b"Tag: py3-none-any\n", b"Tag-: py3-none-any\n"))
    plan = _plan(src, dest, ["torch"])
    assert plan.warnings == ["torch 2 has no WHEEL tags; its Python ABI was not checked"]


def test_a_staying_dist_without_record_does_not_hide_the_claims_of_the_others(pair):
    src, dest = pair
    add_dist(src, "nvidia-cuda-runtime", "13", {"nvidia/cu13/lib/libcudart.so.13": b"13"})
    add_dist(dest, "aaa-legacy", "1", {"aaa/x.py": b"x"}, write_record=False)  # listed first
    add_dist(dest, "nvidia-cuda-runtime-cu12", "12", {"nvidia/__init__.py": b"", "nvidia/cr/libcudart.so.12": b"12"})
    add_dist(dest, "nvidia-nccl-cu12", "2", {"nvidia/__init__.py": b"", "nvidia/nccl/libnccl.so.2": b"n"})
    plan = _plan(src, dest, ["nvidia-cuda-runtime"], remove=["nvidia-cuda-runtime-cu12"])
    assert plan.kept_shared == ["nvidia/__init__.py"]
    assert "destination aaa-legacy 1 has no RECORD; it claims no files" in plan.warnings


def test_destination_record_with_non_utf8_bytes_still_plans(pair):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a"})
    di = add_dist(dest, "torch", "1", {"torch/a.py": b"b", "torch/caf\xe9.py": b"c"})
    record = di / "RECORD"
    record.write_bytes(record.read_bytes().replace("caf\xe9".encode(), b"caf\xe9"))
    plan = _plan(src, dest, ["torch"])
    assert [m["from"] for m in plan.moved] == ["1"] and plan.has_work


def test_removing_a_dist_whose_files_all_stay_shared_still_removes_its_dist_info(pair):
    src, dest = pair
    add_dist(dest, "nvidia-cuda-runtime-cu12", "12", {"nvidia/__init__.py": b""})
    add_dist(dest, "nvidia-nccl-cu12", "2", {"nvidia/__init__.py": b"", "nvidia/nccl/libnccl.so.2": b"n"})
    source = VenvSource(open_venv(str(src)))
    plan = build_plan("run", source, [], open_venv(str(dest)), ["nvidia-cuda-runtime-cu12"])
    assert not plan.deletes  # nvidia/__init__.py stays: nccl claims it
    assert plan.has_work and plan.old_dist_infos == ["nvidia_cuda_runtime_cu12-12.dist-info"]


def test_a_file_already_gone_does_not_stop_the_deletes_after_it(pair):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a"})
    add_dist(dest, "torch", "1", {"torch/a.py": b"b", "torch/gone.py": b"g", "torch/z.py": b"z"})
    next(dest.glob("lib/python3.*/site-packages/torch/gone.py")).unlink()
    plan = _plan(src, dest, ["torch"])
    assert sorted(plan.deletes) == ["torch/z.py"]


def test_a_file_that_would_replace_a_directory_is_refused(pair):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a"})
    add_dist(dest, "torch", "1", {"torch/b.py": b"b"})
    next(dest.glob("lib/python3.*/site-packages/torch")).joinpath("a.py").mkdir()
    with pytest.raises(PlanError, match="^torch/a.py of torch would replace a directory in the destination$"):
        _plan(src, dest, ["torch"])


def test_two_incoming_dists_with_one_path_and_different_content_are_refused(pair):
    src, dest = pair
    add_dist(src, "nvidia-a", "1", {"nvidia/__init__.py": b"a"})
    add_dist(src, "nvidia-b", "1", {"nvidia/__init__.py": b"b"})
    with pytest.raises(PlanError, match="^nvidia/__init__.py is claimed by both incoming nvidia-a and nvidia-b "
                                        "with different content$"):
        _plan(src, dest, ["nvidia-*"])


def test_a_destination_record_that_cannot_be_read_is_named(pair):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a"})
    di = add_dist(dest, "torch", "1", {"torch/a.py": b"b"})
    (di / "RECORD").write_text("torch/a.py,sha256=x,1\n/etc/passwd,,\n")
    with pytest.raises(PlanError, match="^destination torch 1: RECORD refused: "):
        _plan(src, dest, ["torch"])


def test_an_incoming_script_claimed_by_a_staying_dist_is_refused_even_with_equal_content(pair):
    """Scripts are rewritten for the destination, so equal digests prove nothing: the claim is refused."""
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a"}, scripts={"torchrun": "print(1)\n"})
    add_dist(dest, "torch-extras", "1", {"torch_extras/x.py": b"x"}, scripts={"torchrun": "print(1)\n"})
    with pytest.raises(PlanError, match="of incoming torch is also claimed by torch-extras, which stays"):
        _plan(src, dest, ["torch"])


def _leaving_dir_pointing_outside(pair, tmp_path, outside_file=None):
    """evil 1 in dest owns evil/x.py, evil 2 in src does not; dest's evil/ is then swapped for a symlink to
    tmp_path/outside, which holds outside_file ("precious"), or does not exist when outside_file is None."""
    src, dest = pair
    outside = tmp_path / "outside"
    if outside_file is not None:
        outside.mkdir()
        (outside / outside_file).write_bytes(b"precious")
    add_dist(src, "evil", "2", {"evil2/y.py": b"y"})
    add_dist(dest, "evil", "1", {"evil/x.py": b"x"})
    sp = next(dest.glob("lib/python3.*/site-packages"))
    (sp / "evil" / "x.py").unlink()
    (sp / "evil").rmdir()
    (sp / "evil").symlink_to(outside)
    return outside


def test_deleting_through_a_symlink_out_of_the_venv_is_refused(pair, tmp_path):
    src, dest = pair
    outside = _leaving_dir_pointing_outside(pair, tmp_path, "x.py")
    with pytest.raises(PlanError, match="resolves outside the venv"):
        _plan(src, dest, ["evil"])
    assert (outside / "x.py").read_bytes() == b"precious"


@pytest.mark.parametrize("change", ["file_set", "digest"])
def test_same_dist_info_with_another_record_is_not_unchanged(pair, change):
    src, dest = pair
    tag = CPTAG + "-" + CPTAG + "-linux_x86_64"
    add_dist(src, "torch", "2", {"torch/a.py": b"a" * 100, "torch/b.py": b"b"}, tag=tag, mtime=1_700_000_000)
    files = {"torch/a.py": b"a" * 100} if change == "file_set" else {"torch/a.py": b"c" * 100, "torch/b.py": b"b"}
    add_dist(dest, "torch", "2", files, tag=tag, mtime=1_700_000_000)
    plan = _plan(src, dest, ["torch"])
    assert plan.has_work and plan.unchanged == []


def test_bytes_to_write_counts_files_and_dist_info(pair):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a" * 1000})
    plan = _plan(src, dest, ["torch"])
    info = sum(f.size for d in plan.dist_info_writes for f in d.files)
    assert info > 0 and plan.bytes_total == 1000 + info


def _installed_copy(src, dest, files, record_first=False):
    """torch 2 in src, and the copy a finished transplant leaves in dest (same RECORD, sizes, mtimes)."""
    import shutil

    tag = CPTAG + "-" + CPTAG + "-linux_x86_64"
    for venv in (src, dest):
        info = add_dist(venv, "torch", "2", files, tag=tag, mtime=1_700_000_000)
        if record_first:  # some installers write RECORD's own row first
            rows = (info / "RECORD").read_text().splitlines(keepends=True)
            (info / "RECORD").write_text("".join(rows[-1:] + rows[:-1]))
    for name in ("METADATA", "WHEEL", "INSTALLER", "RECORD"):
        src_info = next(src.glob("lib/python3.*/site-packages/torch-2.dist-info"))
        shutil.copy2(src_info / name, next(dest.glob("lib/python3.*/site-packages/torch-2.dist-info")) / name)
    assert not _plan(src, dest, ["torch"]).has_work  # the copy is taken as unchanged
    return next(dest.glob("lib/python3.*/site-packages"))


def test_a_file_removed_from_the_destination_by_hand_is_put_back(pair):
    src, dest = pair
    sp = _installed_copy(src, dest, {"torch/a.py": b"a" * 100, "torch/b.py": b"b"})
    (sp / "torch" / "b.py").unlink()
    plan = _plan(src, dest, ["torch"])
    assert plan.unchanged == [] and sorted(w.path for w in plan.writes) == ["torch/a.py", "torch/b.py"]
    assert {w.path: w.existed for w in plan.writes} == {"torch/a.py": True, "torch/b.py": False}


def test_a_changed_file_is_noticed_whatever_the_place_of_record_in_record(pair):
    """RECORD naming itself first: the files listed after it are still checked."""
    src, dest = pair
    sp = _installed_copy(src, dest, {"torch/a.py": b"a" * 100, "torch/b.py": b"b" * 10}, record_first=True)
    (sp / "torch" / "b.py").write_bytes(b"changed by hand")
    os.utime(sp / "torch" / "b.py", (1_700_000_000, 1_700_000_000))
    plan = _plan(src, dest, ["torch"])
    assert plan.unchanged == [] and plan.moved[0]["to"] == "2"


def test_the_largest_files_are_placed_first(pair):
    """The runner keeps the plan's order: the long copies start first, the small files fill in."""
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a", "torch/lib/big.so": b"x" * 5000, "torch/mid.py": b"m" * 100,
                                 "torch/lib/small.so": b"s" * 10})
    plan = _plan(src, dest, ["torch"])
    assert [w.path for w in plan.writes] == ["torch/lib/big.so", "torch/mid.py", "torch/lib/small.so", "torch/a.py"]


def test_the_new_record_keeps_the_source_record_mtime(pair):
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/a.py": b"a"}, mtime=1_600_000_000)
    record = next(src.glob("lib/python3.*/site-packages/torch-2.dist-info")) / "RECORD"
    os.utime(record, (1_600_000_000, 1_600_000_000))
    plan = _plan(src, dest, ["torch"])
    written = {f.path: f for f in plan.dist_info_writes[0].files}
    assert written["torch-2.dist-info/RECORD"].mtime_ns == 1_600_000_000 * 10**9
    assert written["torch-2.dist-info/METADATA"].mtime_ns == 1_600_000_000 * 10**9


def test_a_leaving_file_already_gone_behind_a_symlink_out_of_the_venv_is_not_refused(pair, tmp_path):
    """Only what is there to delete is checked: a missing file whose directory points out of the venv is
    nothing to delete and nothing to refuse."""
    src, dest = pair
    outside = _leaving_dir_pointing_outside(pair, tmp_path, "keep.py")  # x.py is not there
    plan = _plan(src, dest, ["evil"])
    assert plan.deletes == [] and plan.old_dist_infos == ["evil-1.dist-info"]
    assert sorted(p.name for p in outside.iterdir()) == ["keep.py"]


def test_a_leaving_dir_swapped_for_a_dangling_symlink_is_nothing_to_delete(pair, tmp_path):
    """A symlink to nowhere cannot be listed: its files are not there, so the plan deletes nothing through it."""
    src, dest = pair
    outside = _leaving_dir_pointing_outside(pair, tmp_path)
    plan = _plan(src, dest, ["evil"])
    assert plan.deletes == [] and plan.old_dist_infos == ["evil-1.dist-info"]
    assert [w.path for w in plan.writes] == ["evil2/y.py"] and not outside.exists()


def test_an_incoming_file_into_a_dangling_symlink_out_of_the_venv_is_refused(pair, tmp_path):
    src, dest = pair
    add_dist(src, "evil", "1", {"evil/x.py": b"x"})
    sp = next(dest.glob("lib/python3.*/site-packages"))
    (sp / "evil").symlink_to(tmp_path / "nowhere")
    with pytest.raises(PlanError, match="^destination path %s/evil/x.py resolves outside the venv \\(%s\\)$"
                       % (sp, tmp_path / "nowhere")):
        _plan(src, dest, ["evil"])
    assert not (tmp_path / "nowhere").exists()


def test_a_file_that_is_a_symlink_in_the_destination_is_replaced(pair):
    """A library installed as a symlink (libx.so -> libx.so.1) is a file to overwrite, not a directory."""
    src, dest = pair
    add_dist(src, "torch", "2", {"torch/lib/libx.so": b"new", "torch/lib/libx.so.1": b"new"})
    add_dist(dest, "torch", "1", {"torch/lib/libx.so.1": b"old"}, record_extra=[("torch/lib/libx.so", "", "")])
    sp = next(dest.glob("lib/python3.*/site-packages"))
    (sp / "torch" / "lib" / "libx.so").symlink_to("libx.so.1")
    plan = _plan(src, dest, ["torch"])
    assert {w.path: w.existed for w in plan.writes} == {"torch/lib/libx.so": True, "torch/lib/libx.so.1": True}
    assert plan.deletes == [] and plan.new_dirs == []


def test_a_distribution_with_nothing_but_its_dist_info_is_placed(pair):
    """A metapackage (only requirements, no files of its own) still lands: its dist-info is the work."""
    src, dest = pair
    add_dist(src, "sglang-all", "1", {})
    plan = _plan(src, dest, ["sglang-all"])
    assert plan.writes == [] and plan.deletes == [] and plan.old_dist_infos == []
    assert plan.has_work and [d.dist_info for d in plan.dist_info_writes] == ["sglang_all-1.dist-info"]
    assert plan.moved[0]["from"] is None and plan.moved[0]["to"] == "1"


def test_a_same_version_copy_whose_record_is_damaged_is_refused_not_taken_as_unchanged(pair):
    """Same dist-info, same sizes and mtimes, but the destination RECORD cannot be read: nothing proves the
    copy matches, and the plan cannot tell its files, so it says so instead of reporting "unchanged"."""
    src, dest = pair
    sp = _installed_copy(src, dest, {"torch/a.py": b"a" * 100})
    record = sp / "torch-2.dist-info" / "RECORD"
    record.write_text(record.read_text() + "/etc/passwd,,\n")
    os.utime(record, (1_700_000_000, 1_700_000_000))
    with pytest.raises(PlanError, match="^destination torch 2: RECORD refused: .*absolute path '/etc/passwd'"):
        _plan(src, dest, ["torch"])
