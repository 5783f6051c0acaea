"""changes: the lines a deploy (or a --check run) prints about what it changes."""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.filter.changes import (
    lock_changes,
    overlay_changes,
    parse_lock,
    release_changes,
    service_changes,
    transplant_changes,
    uv_changes,
)

OLD_LOCK = """sglang==0.5.9
    # via -r -
torch==2.9.1+cu128
    # via sglang
Triton==3.5.1
sgl-kernel==0.3.21
"""
NEW_LOCK = """sglang[all]==0.5.9
torch==2.11.0+cu130
triton==3.6.0
flashinfer_python==0.6.8.post1
"""


def spec(lock, python="3.11", **inputs):
    return {"lock": lock, "python": python, "inputs": inputs}


def test_the_lock_is_read_as_names_and_versions_whatever_the_spelling():
    assert parse_lock(OLD_LOCK) == {"sglang": "0.5.9", "torch": "2.9.1+cu128", "triton": "3.5.1",
                                    "sgl-kernel": "0.3.21"}
    assert parse_lock("foo @ file:///opt/dflash/artifacts/wheelhouse/foo-1.0-py3-none-any.whl\n") == {
        "foo": "foo-1.0-py3-none-any.whl"}
    assert parse_lock("--index-url http://x\n# comment\n\n") == {}


def test_package_changes_name_each_upgrade_addition_and_removal():
    assert lock_changes(OLD_LOCK, NEW_LOCK) == [
        "+ flashinfer-python 0.6.8.post1",
        "- sgl-kernel 0.3.21",
        "torch 2.9.1+cu128 -> 2.11.0+cu130",
        "triton 3.5.1 -> 3.6.0",
    ]
    assert lock_changes(NEW_LOCK, NEW_LOCK) == []


def test_a_new_release_on_a_deployed_host_says_what_differs():
    running = {"release_id": "aaaa", "spec": spec(OLD_LOCK, dflash_overlay="d1", cuda_overlay="c1")}
    lines = release_changes([running], spec(NEW_LOCK, dflash_overlay="d1", cuda_overlay="c2"), "bbbb")
    assert lines == ["release bbbb replaces aaaa: packages: + flashinfer-python 0.6.8.post1, - sgl-kernel 0.3.21, "
                     "torch 2.9.1+cu128 -> 2.11.0+cu130, triton 3.5.1 -> 3.6.0; CUDA 13 bundle changed"]


def test_python_and_unknown_inputs_are_named_and_long_package_lists_are_cut():
    many_old = "".join(f"p{i}==1.0\n" for i in range(12))
    many_new = "".join(f"p{i}==2.0\n" for i in range(12))
    running = {"release_id": "aaaa", "spec": spec(many_old, python="3.10", extra="x")}
    (line,) = release_changes([running], spec(many_new, python="3.11"), "bbbb")
    assert ", +4 more; python 3.10 -> 3.11; extra changed" in line
    assert line.count(" -> 2.0") == 8


def test_no_line_when_the_instances_already_run_the_release_and_one_per_distinct_release():
    same = {"release_id": "bbbb", "spec": spec(NEW_LOCK)}
    assert release_changes([same, same], spec(NEW_LOCK), "bbbb") == []
    other = {"release_id": "aaaa", "spec": spec(OLD_LOCK)}
    assert len(release_changes([same, other, other], spec(NEW_LOCK), "bbbb")) == 1


def test_a_fresh_host_gets_one_new_release_line():
    assert release_changes([], spec(NEW_LOCK), "bbbb") == ["release bbbb: new (4 locked packages)"]
    assert release_changes([{"broken": True}], spec(NEW_LOCK), "bbbb") == ["release bbbb: new (4 locked packages)"]


def test_service_changes_name_the_files_and_links_that_changed():
    env = {"results": [{"item": {"name": "a"}, "changed": True}, {"item": {"name": "b"}, "changed": False}]}
    dropin = {"results": [{"item": {"name": "b"}, "changed": True}]}
    flip = {"results": [{"item": {"name": "a"}, "changed": True}, {"item": {"name": "b"}, "changed": True}]}
    lines = service_changes(env, dropin=dropin, unit={"changed": True}, launcher={"changed": False}, flip=flip,
                            config_dir="/etc/dflash", release_id="bbbb")
    assert lines == [
        "env file /etc/dflash/a.env (contents not shown: it holds the API key)",
        "GPU drop-in of sglang-dflash@b.service",
        "unit template sglang-dflash@.service",
        "current -> release bbbb for a, b (restart)",
    ]
    assert service_changes({"skipped": True}, dropin=None, unit={}, launcher=None, flip={"results": []}) == []


def test_check_mode_names_the_instances_that_would_switch_to_an_unbuilt_release():
    skipped = {"results": [{"item": {"name": "a"}, "changed": False, "skipped": True}]}
    assert service_changes(None, flip=skipped, release_id="cccc", unbuilt=["a"]) == [
        "current -> release cccc for a (restart)"]


def test_an_instance_that_restarts_onto_what_an_interrupted_run_wrote_comes_first():
    env = {"results": [{"item": {"name": "a"}, "changed": True}]}
    started_before = [{"name": "b", "started": 100, "written": 160,
                       "paths": ["/etc/dflash/b.env", "/opt/dflash/instances/b/current"]}]
    assert service_changes(env, started_before=started_before) == [
        "sglang-dflash@b.service runs what came before /etc/dflash/b.env, /opt/dflash/instances/b/current: "
        "restart (an interrupted run wrote them)",
        "env file /etc/dflash/a.env (contents not shown: it holds the API key)"]
    assert service_changes(env, started_before=[]) == [
        "env file /etc/dflash/a.env (contents not shown: it holds the API key)"]


def test_transplant_changes_read_the_modules_moved_and_removed_lists():
    result = {"moved": [{"name": "torch", "from": "2.11.0+cu128", "to": "2.11.0+cu130"},
                        {"name": "nvidia-cuda-runtime", "from": None, "to": "13.0.96"}],
              "removed": [{"name": "nvidia-cuda-runtime-cu12", "version": "12.8.90"}]}
    assert transplant_changes(result, "CUDA 13 bundle") == [
        "CUDA 13 bundle: torch 2.11.0+cu128 -> 2.11.0+cu130, + nvidia-cuda-runtime 13.0.96, "
        "- nvidia-cuda-runtime-cu12 12.8.90"]
    assert transplant_changes({"moved": [], "removed": []}, "x") == []
    assert transplant_changes({"skipped": True}, "x") == []


def test_uv_changes_pair_removals_and_additions_into_upgrades():
    stderr = ("Resolved 1 package in 3ms\nWould uninstall 1 package\nWould install 1 package\n"
              " - sgl-kernel==0.3.21\n + sglang-kernel==0.4.2\n - torch==2.9.1+cu128\n + torch==2.11.0+cu130\n")
    assert uv_changes(stderr, "kernel pins") == [
        "kernel pins: - sgl-kernel 0.3.21, + sglang-kernel 0.4.2, torch 2.9.1+cu128 -> 2.11.0+cu130"]
    assert uv_changes("Audited 3 packages in 1ms\n", "kernel pins") == []


def test_overlay_changes_count_files_and_name_hand_edited_ones():
    lines = ["add sglang/srt/speculative/dflash_worker.py", "add sglang/srt/speculative/ddtree.py",
             "replace sglang/srt/server_args.py", "drift sglang/srt/models/qwen3.py", "manifest"]
    assert overlay_changes(lines, "DFlash sources") == [
        "DFlash sources: 2 files added, 1 replaced, restored after hand edits: sglang/srt/models/qwen3.py"]
    assert overlay_changes(["manifest"], "DFlash sources") == []
    assert overlay_changes(["record", "manifest"], "DFlash sources") == []


def test_overlay_changes_count_removed_files_and_name_stale_ones():
    lines = ["replace sglang/version.py", "remove sglang/srt/models/mimo_v2_flash.py", "remove sglang/a.py",
             "stale sglang/srt/models/mimo_v2_flash_nextn.py", "record", "manifest"]
    assert overlay_changes(lines, "DFlash sources") == [
        "DFlash sources: 1 replaced, 2 removed (not in the tree), "
        "removed again (not in the tree): sglang/srt/models/mimo_v2_flash_nextn.py"]


def test_hash_changes_name_newly_pinned_locks_and_other_bytes_under_one_version():
    hashed = ("sglang==0.5.9 \\\n    --hash=sha256:" + "a" * 64
              + "\ntorch==2.11.0+cu130 \\\n    --hash=sha256:" + "b" * 64)
    other = hashed.replace("a" * 64, "c" * 64)
    old = "sglang==0.5.9\ntorch==2.11.0+cu130\n"
    assert release_changes([{"release_id": "aaaa", "spec": spec(old)}], spec(hashed), "bbbb") == [
        "release bbbb replaces aaaa: sha256 now pinned (2 packages)"]
    assert release_changes([{"release_id": "bbbb", "spec": spec(hashed)}], spec(other), "cccc") == [
        "release cccc replaces bbbb: other sha256 for sglang 0.5.9"]
    assert lock_changes(hashed, other) == []  # the same names and versions
