"""module_utils/fingerprint.py and the release_fingerprint module: what changes a release's fingerprint, what
does not, and when its marker vouches for it."""
from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dflash.deploy.plugins.module_utils import fingerprint as FP
from ansible_collections.dflash.deploy.plugins.modules import release_fingerprint


@pytest.fixture
def release(tmp_path):
    rel = tmp_path / "releases" / "5c1e0a9b3d2f4e61"
    site = rel / "lib" / "python3.12" / "site-packages" / "sglang"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("VERSION = '0.5.11'\n")
    (site / "dflash.py").write_text("def draft(): return 16\n")
    (rel / "bin").mkdir()
    os.symlink("/usr/bin/python3.12", rel / "bin" / "python")
    (rel / ".dflash-release").mkdir()
    return rel


def fp(rel):
    return FP.fingerprint(str(rel))


def mark(rel, **kw):
    data = {"release_id": rel.name, "fingerprint": fp(rel).sha256, **kw}
    (rel / ".dflash-release" / "verified.json").write_text(json.dumps(data))
    return data


def test_the_same_tree_has_the_same_fingerprint_and_counts_its_files(release):
    a, b = fp(release), fp(release)
    assert a == b and a.files == 2 and a.bytes == len("VERSION = '0.5.11'\n") + len("def draft(): return 16\n")


def _edit_same_size_same_mtime(rel):
    f = rel / "lib/python3.12/site-packages/sglang/dflash.py"
    st = f.stat()
    f.write_text("def draft(): return 99\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("change", [
    lambda r: (r / "lib/python3.12/site-packages/sglang/dflash.py").write_text("def draft(): return 160\n"),
    lambda r: os.utime(r / "lib/python3.12/site-packages/sglang/dflash.py", ns=(0, 1)),
    lambda r: (r / "lib/python3.12/site-packages/sglang/evil.pth").write_text("import os\n"),
    lambda r: (r / "lib/python3.12/site-packages/sglang/__init__.py").unlink(),
    lambda r: os.chmod(r / "lib/python3.12/site-packages/sglang/dflash.py", 0o666),
    lambda r: os.chmod(r / "lib/python3.12/site-packages/sglang", 0o777),
    lambda r: (os.unlink(r / "bin/python"), os.symlink("/tmp/python", r / "bin/python")),
    lambda r: os.rename(r / "lib/python3.12/site-packages/sglang/dflash.py",
                        r / "lib/python3.12/site-packages/sglang/x.py"),
], ids=["content", "mtime", "added file", "removed file", "file mode", "directory mode", "link target", "rename"])
def test_a_write_through_the_filesystem_changes_the_fingerprint(release, change):
    before = fp(release).sha256
    change(release)
    assert fp(release).sha256 != before


def test_what_it_does_not_see_is_what_the_docs_say(release):
    """A hard link added elsewhere (uv's cache) changes no fingerprint; a root edit that keeps size and mtime
    is not seen either (audit.yml hashes files for that)."""
    before = fp(release).sha256
    os.link(release / "lib/python3.12/site-packages/sglang/dflash.py", release.parent / "cache-link")
    (release / ".dflash-release" / "verified.json").write_text("{}")   # the marker directory is left out
    assert fp(release).sha256 == before
    _edit_same_size_same_mtime(release)
    assert fp(release).sha256 == before


def test_a_link_to_a_directory_is_not_followed(release, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, release / "lib" / "elsewhere")
    before = fp(release).sha256
    (outside / "new.py").write_text("x = 1\n")
    assert fp(release).sha256 == before


@pytest.mark.parametrize(("marker", "tree", "inputs", "expected"), [
    (None, "a" * 64, None, "it was never verified"),
    ({"release_id": "other"}, "a" * 64, None, "its verified.json names release other: a marker copied"),
    ({"release_id": "r"}, "a" * 64, None, "records no fingerprint"),
    ({"release_id": "r", "fingerprint": "b" * 64}, "a" * 64, None, "its files changed since it was verified"),
    ({"release_id": "r", "fingerprint": "a" * 64, "inputs": "x"}, "a" * 64, "y", "verified for other inputs"),
])
def test_each_reason_the_marker_does_not_vouch(marker, tree, inputs, expected):
    found = FP.marker_errors(marker, "r", tree, inputs)
    assert len(found) == 1 and expected in found[0], found


def test_a_marker_vouches_for_its_own_release_as_it_is():
    m = {"release_id": "r", "fingerprint": "a" * 64, "inputs": "x"}
    assert FP.marker_errors(m, "r", "a" * 64, "x") == [] and FP.marker_errors(m, "r", "a" * 64) == []


@pytest.mark.parametrize(("marker", "changed"), [
    (None, True), ({"release_id": "other", "fingerprint": "a" * 64}, True),
    ({"release_id": "r", "fingerprint": "b" * 64}, True), ({"release_id": "r", "fingerprint": "a" * 64}, False),
    ({"release_id": "r"}, False),   # an older deploy's marker: upgrading the collection restarts nothing
])
def test_files_changed_is_what_restarts_a_running_server(marker, changed):
    assert FP.files_changed(marker, "r", "a" * 64) is changed


def run(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            release_fingerprint.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def test_the_module_vouches_then_sees_an_edit(release, capsys):
    mark(release, inputs="i" * 64)
    res = run({"path": str(release), "inputs_sha256": "i" * 64}, capsys)
    assert res["vouched"] is True and res["changed"] is False and res["files_changed"] is False
    assert res["fingerprint"]["files"] == 2 and res["marker"]["release_id"] == release.name
    assert run({"path": str(release), "inputs_sha256": "j" * 64}, capsys)["vouched"] is False
    (release / "lib/python3.12/site-packages/sglang/dflash.py").write_text("tampered\n")
    res = run({"path": str(release)}, capsys)
    assert res["vouched"] is False and res["files_changed"] is True
    assert "its files changed since it was verified" in res["marker_errors"][0]


def test_the_module_reads_no_link_and_no_fifo(release, tmp_path, capsys):
    link = tmp_path / "releases" / "link"
    os.symlink(release, link)
    res = run({"path": str(link)}, capsys)
    assert res["fingerprint"] is None and res["vouched"] is False
    assert res["marker_errors"] == [f"{link} is a symbolic link, not a release directory"]
    os.mkfifo(release / ".dflash-release" / "verified.json")
    res = run({"path": str(release)}, capsys)
    assert res["vouched"] is False and "it was never verified: no readable verified.json" in res["marker_errors"][0]
    res = run({"path": str(tmp_path / "missing")}, capsys)
    assert res["vouched"] is False and "cannot be read" in res["marker_errors"][0]


def test_line_of_is_the_entry_line_for_every_kind(release):
    """line_of (site_packages_transplant's record) describes a path exactly as entry().line() does."""
    os.mkfifo(release / "fifo")
    rels = ["lib/python3.12/site-packages/sglang/__init__.py", "lib/python3.12/site-packages/sglang", "bin/python",
            "fifo", "bin"]
    for rel in rels:
        assert FP.line_of(str(release / rel), rel) == FP.entry(str(release), rel).line(), rel
    with pytest.raises(OSError):
        FP.line_of(str(release / "gone"), "gone")
