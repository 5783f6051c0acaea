"""release_trust_errors: a link and the marker in the release it names earn no trust by existing.
releases_to_prune: the releases beyond the newest few that nothing uses."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils import fingerprint as FP

_spec = importlib.util.spec_from_file_location(
    "dflash_releases_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "releases.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)

BASE = "/opt/dflash"
REL = "/opt/dflash/releases/5c1e0a9b3d2f4e61"
LINK = {"exists": True, "islnk": True, "path": "/opt/dflash/instances/qwen3-8b/previous", "lnk_source": REL}
DIR = {"exists": True, "isdir": True, "islnk": False, "uid": 0, "pw_name": "root", "mode": "0755"}


TREE = "4c1f" * 16


def marker(**kw):
    """release_fingerprint's result for REL with the marker `kw` overrides, its tree still at TREE."""
    mark = {"release_id": "5c1e0a9b3d2f4e61", "fingerprint": TREE, "torch": "2.11.0+cu130", **kw}
    return {"marker": mark, "marker_errors": FP.marker_errors(mark, "5c1e0a9b3d2f4e61", TREE)}


def errors(link=None, target=None, mark=None):
    return mod.release_trust_errors({**LINK, **(link or {})}, {**DIR, **(target or {})},
                                    marker() if mark is None else mark, BASE, "previous")


def test_a_verified_release_inside_the_layout_is_trusted():
    assert errors() == []
    assert mod.release_trust_errors(LINK, DIR, marker(), BASE + "/", "previous") == []   # a trailing slash


@pytest.mark.parametrize(("link", "target", "mark", "expected"), [
    ({"exists": False}, None, None, "previous (/opt/dflash/instances/qwen3-8b/previous) does not exist"),
    ({"islnk": False}, None, None, "is not a symbolic link"),
    ({"lnk_source": "/srv/evil-release"}, None, None, "resolves to /srv/evil-release, outside /opt/dflash/releases/"),
    ({"lnk_source": "/opt/dflash/releases"}, None, None, "outside /opt/dflash/releases/"),
    ({"lnk_source": REL + "/sub"}, None, None, "outside /opt/dflash/releases/"),
    ({"lnk_source": ""}, None, None, "resolves to ?, outside"),
    (None, {"exists": False}, None, "which does not exist"),
    (None, {"islnk": True}, None, "which is a symbolic link, not a release directory"),
    (None, {"isdir": False}, None, "which is not a directory"),
    (None, {"uid": 998, "pw_name": "sglang"}, None, "owned by sglang, not root"),
    (None, {"mode": "0777"}, None, "writable by group or others (mode 0777)"),
    (None, {"mode": "0775"}, None, "writable by group or others (mode 0775)"),
    (None, None, {}, "whose verified.json was not read: it was never verified"),
    (None, None, {"skipped": True}, "whose verified.json was not read"),
    (None, None, {"marker": None, "marker_errors": FP.marker_errors(None, "5c1e0a9b3d2f4e61", TREE)},
     "it was never verified"),
    (None, None, marker(release_id="38da00aa11bb22cc"),
     "its verified.json names release 38da00aa11bb22cc: a marker copied from another release verifies nothing"),
    (None, None, marker(fingerprint="77ab" * 16), "its files changed since it was verified"),
    (None, None, marker(fingerprint=None), "records no fingerprint"),
])
def test_each_reason_is_named_with_its_path(link, target, mark, expected):
    found = errors(link, target, mark)
    assert len(found) >= 1 and expected in found[0], found
    assert found[0].startswith("previous (/opt/dflash/instances/qwen3-8b/previous)")


def test_a_foreign_owner_and_loose_mode_are_both_named_and_the_marker_is_not_read():
    found = errors(target={"uid": 1000, "pw_name": None, "mode": "0757"}, mark={})
    assert found == ["previous (/opt/dflash/instances/qwen3-8b/previous) names " + REL + ", owned by 1000, not root",
                     "previous (/opt/dflash/instances/qwen3-8b/previous) names " + REL
                     + ", which is writable by group or others (mode 0757)"]


def test_nothing_given_is_no_release():
    assert mod.release_trust_errors(None, None, None, BASE, "current") == ["current (current) does not exist"]


def _found(*names_mtimes):
    return [{"path": f"/opt/dflash/releases/{n}", "mtime": m} for n, m in names_mtimes]


def test_prune_keeps_the_newest_and_whatever_an_instance_or_this_run_uses():
    found = _found(("a", 1.0), ("b", 4.0), ("c", 3.0), ("d", 2.0), ("e", 5.0))
    in_use = ["/opt/dflash/releases/a", "/opt/dflash/releases/x-gone"]
    assert mod.releases_to_prune(found, in_use, 2, "/opt/dflash/releases/d") == ["/opt/dflash/releases/c"]
    oldest_three = ["/opt/dflash/releases/c", "/opt/dflash/releases/d", "/opt/dflash/releases/a"]
    assert mod.releases_to_prune(found, [], 2) == oldest_three


def test_prune_takes_keep_as_given_with_e_and_zero_keeps_what_is_in_use():
    found = _found(("old", 1.0), ("new", 2.0))
    assert mod.releases_to_prune(found, [], "1") == ["/opt/dflash/releases/old"]
    assert mod.releases_to_prune(found, ["/opt/dflash/releases/new"], 0) == ["/opt/dflash/releases/old"]
    assert mod.releases_to_prune(found, [], "3") == []


def test_prune_compares_resolved_paths_not_spellings():
    found = _found(("old", 1.0), ("new", 2.0))
    assert mod.releases_to_prune(found, ["/opt/dflash/releases/./old/"], 1) == []
    assert mod.releases_to_prune(found, [""], 1, "") == ["/opt/dflash/releases/old"]


def test_release_file_names_each_recorded_file_of_the_contract():
    assert mod.release_file(REL, "verified") == REL + "/.dflash-release/verified.json"
    assert mod.release_file(REL, "built") == REL + "/.dflash-release/built.json"
    assert mod.release_file(REL, "lock") == REL + "/.dflash-release/lock.txt"
    assert mod.release_file(REL, "overlay_manifest") == REL + "/.dflash-release/dflash-overlay.sha256"
    assert mod.release_file(REL) == REL + "/.dflash-release"
    # the fingerprint leaves out the same directory the filter names
    assert FP.MARKER_DIR == ".dflash-release"


def test_release_file_refuses_a_name_outside_the_contract_in_one_line():
    with pytest.raises(mod.AnsibleFilterError) as err:
        mod.release_file(REL, "verify")
    assert "no release file named 'verify'" in str(err.value) and "verified" in str(err.value)


def test_no_role_task_or_playbook_spells_the_release_directory():
    # The release contract has one owner (module_utils/release/contract.py): the roles reach its
    # files through release_file, so a rename is one edit.
    repo = Path(__file__).resolve().parents[4]
    files = [*repo.glob("roles/*/tasks/*.yml"), *repo.glob("roles/*/defaults/*.yml"), *repo.glob("playbooks/**/*.yml")]

    def code(path):
        return [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    offenders = [str(p.relative_to(repo)) for p in files if any(".dflash-release" in line for line in code(p))]
    assert offenders == []


def test_release_file_names_the_files_kept_per_instance():
    assert mod.release_file(REL, "perf", "qwen3-8b") == REL + "/.dflash-release/perf-qwen3-8b.json"
    assert mod.release_file(REL, "perf_candidate", "qwen3-8b") == REL + "/.dflash-release/perf-qwen3-8b.next.json"
    # a per-instance file needs its instance, and only such a file takes one
    for name, instance in (("perf", ""), ("perf", "../x"), ("perf", ".hidden"), ("verified", "qwen3-8b")):
        with pytest.raises(mod.AnsibleFilterError) as err:
            mod.release_file(REL, name, instance)
        assert str(err.value).startswith("release_file: the release file")
