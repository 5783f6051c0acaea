"""pydist/distributions.py on venv-like trees: what pkg_probe reports per distribution (RECORD, INSTALLER,
top-level names, missing files) and which import names more than one distribution owns (issue 14)."""
from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import pytest
import transplant_support as T
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import distributions as D

MIB = 1 << 20


@pytest.fixture
def venv(tmp_path):
    """A venv-like tree (no interpreter needed): venv/lib/python3.11/site-packages."""
    root = tmp_path / "venv"
    (root / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    return root


def sp(venv: Path) -> Path:
    return T.site_packages(venv)


def write_record(dist_info: Path, rows) -> None:
    """Replace a RECORD with rows given as text lines."""
    (dist_info / "RECORD").write_text("".join(row + "\n" for row in rows))


def scan(venv: Path) -> dict:
    return D.scan(str(sp(venv)))


def owners(venv: Path) -> dict:
    return D.import_owners(str(sp(venv)), scan(venv))


@contextlib.contextmanager
def deadline(seconds: int):
    """A scan that loops forever fails the test instead of hanging it."""
    def stop(_signum, _frame):
        raise TimeoutError("still running after %d s" % seconds)
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --- one distribution's facts ------------------------------------------------------------------------------


def test_local_tag_is_everything_after_the_first_plus():
    assert D.local_tag("2.11.0+cu130") == "cu130"
    assert D.local_tag("2.11.0+cu130+extra") == "cu130+extra"
    assert D.local_tag("") is None and D.local_tag(None) is None


def test_missing_record_is_an_error_not_an_exception(venv):
    di = T.add_dist(venv, "gone-record", "1.0", {"gone_record/__init__.py": b"x = 1\n"})
    (di / "RECORD").unlink()
    dist = scan(venv)["gone-record"]
    assert dist["errors"] == ["RECORD: No such file or directory"]
    assert dist["record"] == [] and dist["top_level"] == []
    view = D.public_view(dist)
    assert view["errors"] == ["RECORD: No such file or directory"] and view["files"] == 0


def test_malformed_record_names_the_line(venv):
    di = T.add_dist(venv, "bad-record", "1.0", {"bad_record/__init__.py": b"x = 1\n"})
    write_record(di, ["bad_record/__init__.py,sha256=abc,6,extra"])
    dist = scan(venv)["bad-record"]
    assert dist["errors"] == ["RECORD: malformed (RECORD line 1 has 4 fields)"] and dist["record"] == []


def test_record_paths_are_reported_as_written_not_refused(venv):
    """pkg_probe reports what is installed: a RECORD path that leaves the venv is listed (and missing), not an
    error that hides the whole RECORD."""
    di = T.add_dist(venv, "escaper", "1.0", {"escaper/__init__.py": b"x = 1\n"})
    rows = (di / "RECORD").read_text().splitlines()
    write_record(di, rows + ["../../../../../outside/evil.txt,,"])
    site = sp(venv)
    dist = scan(venv)["escaper"]
    assert dist["errors"] == [] and dist["top_level"] == ["escaper"]
    assert D.public_view(dist)["files"] == len(rows) + 1
    state = D.check_files(str(site), dist)
    assert state["missing_files"] == ["../../../../../outside/evil.txt"] and state["missing_count"] == 1


def test_record_size_limit_is_64_mib(venv):
    """A RECORD of exactly 64 MiB is read; one byte more is refused by name (never read in part)."""
    site = sp(venv)
    at_limit = T.add_dist(venv, "at-limit", "1.0", {"at_limit/__init__.py": b"x = 1\n"})
    text = (at_limit / "RECORD").read_text()
    padding = 64 * MIB - len(text.encode()) - 1
    (at_limit / "RECORD").write_text(text + " " * padding + "\n")
    assert (at_limit / "RECORD").stat().st_size == 64 * MIB
    over = T.add_dist(venv, "over-limit", "1.0", {"over_limit/__init__.py": b"x = 1\n"})
    with open(over / "RECORD", "r+b") as handle:
        handle.truncate(64 * MIB + 1)
    dists = D.scan(str(site))
    assert dists["at-limit"]["errors"] == [] and len(dists["at-limit"]["record"]) == 5
    assert dists["at-limit"]["top_level"] == ["at_limit"]
    assert dists["over-limit"]["errors"] == ["RECORD: is %d bytes, more than the %d this format allows"
                                             % (64 * MIB + 1, 64 * MIB)]
    assert dists["over-limit"]["record"] == []


@pytest.mark.parametrize("count, kept", [(10000, 10000), (10001, 0)])
def test_requires_dist_limit(venv, count, kept):
    """10,000 Requires-Dist lines are all checked; one more and none are, with an error saying so."""
    di = T.add_dist(venv, "many-deps", "1.0", {"many_deps/__init__.py": b""})
    lines = "".join("Requires-Dist: dep%d>=1\n" % i for i in range(count))
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: many-deps\nVersion: 1.0\n" + lines + "\n")
    dist = scan(venv)["many-deps"]
    assert len(dist["requires"]) == kept
    if kept:
        assert dist["errors"] == [] and dist["requires"][-1] == "dep9999>=1"
    else:
        assert dist["errors"] == ["METADATA: 10001 Requires-Dist lines, more than the 10000 read; "
                                  "requirements not checked"]


def test_top_level_inferred_from_record(venv):
    """Without top_level.txt: first directories and single modules, however short; a file named just ``.py``
    gives no empty name."""
    T.add_dist(venv, "tiny", "1.0", {"x.py": b"x = 1\n", "ab.py": b"", "pkg/sub/mod.py": b"", ".py": b"",
                                     "data.txt": b"text"})
    assert scan(venv)["tiny"]["top_level"] == ["ab", "pkg", "x"]


def test_same_name_installed_three_times(venv):
    """Three dist-info directories of one normalized name: all kept, as name, name#2, name#3 (in dir order)."""
    for name, version in (("Foo_Bar", "1.0"), ("foo.bar", "2.0"), ("foo_bar", "3.0")):
        T.add_dist(venv, name, version, {"foo_bar/v%s.py" % version[0]: b"v = 1\n"})
    with deadline(20):
        dists = scan(venv)
    assert {k: d["version"] for k, d in dists.items()} == {"foo-bar": "1.0", "foo-bar#2": "2.0", "foo-bar#3": "3.0"}


def test_public_view(venv):
    """Full view by default; ``errors`` only when there are some."""
    T.add_dist(venv, "clean", "2.0", {"clean/__init__.py": b"x = 1\n"})
    dist = scan(venv)["clean"]
    dist.update(D.check_files(str(sp(venv)), dist))
    assert D.public_view(dist) == {"name": "clean", "version": "2.0", "installer": "uv", "requires": [],
                                   "top_level": ["clean"], "files": 5, "missing_files": [], "missing_count": 0,
                                   "broken_symlinks": [], "broken_symlink_count": 0,
                                   "record_sha256": D.record_digest(dist["record"])}
    assert len(dist["record_sha256"]) == 64
    assert D.public_view(dist, detailed=False) == {"name": "clean", "version": "2.0"}


def test_check_files_lists_five_of_each_and_counts_all(venv):
    files = {"many/m%d.py" % i: b"m = %d\n" % i for i in range(6)}
    files.update({"many/l%d.py" % i: b"l = %d\n" % i for i in range(6)})
    T.add_dist(venv, "many", "1.0", files)
    site = sp(venv)
    for i in range(6):
        (site / "many" / ("m%d.py" % i)).unlink()
        (site / "many" / ("l%d.py" % i)).unlink()
        (site / "many" / ("l%d.py" % i)).symlink_to(site / "nowhere")
    state = D.check_files(str(site), scan(venv)["many"])
    assert state == {"missing_files": ["many/m%d.py" % i for i in range(5)], "missing_count": 6,
                     "broken_symlinks": ["many/l%d.py" % i for i in range(5)], "broken_symlink_count": 6}


# --- import names owned twice ------------------------------------------------------------------------------


def pair(venv: Path, name: str, files_a: dict, files_b: dict, top_level=None) -> None:
    """Two distributions that both install the import name ``name``; the second (name-b) is installed last."""
    for suffix, files in (("a", files_a), ("b", files_b)):
        di = T.add_dist(venv, "%s-%s" % (name, suffix), "1.0", files)
        if top_level is not None:
            (di / "top_level.txt").write_text("\n".join(top_level) + "\n")


def test_single_owner_names_do_not_stop_the_search(venv):
    """A name only one distribution owns, sorting before a shared one, does not hide the shared one."""
    T.add_dist(venv, "alone", "1.0", {"aaa/__init__.py": b"a = 1\n"})
    pair(venv, "zzz", {"zzz/__init__.py": b"a = 1\n"}, {"zzz/__init__.py": b"b = 1\n"})
    assert owners(venv) == {"zzz": {"distributions": ["zzz-a", "zzz-b"], "shared_files": 1, "on_disk": ["zzz-b"]}}


def test_only_files_of_the_import_name_count(venv):
    """A vendored library directory (``numpy.libs/``) and __pycache__ are not the import name's files; files
    only one owner has, and empty namespace __init__.py files, do not end the count."""
    common = {"numpy.libs/libopenblas-r0.so": b"blas"}
    files_a = {"numpy/__pycache__/__init__.cpython-311.pyc": b"pyc-a", "numpy/only_a.py": b"a = 1\n",
               "numpy/core/__init__.py": b"", "numpy/__init__.py": b"a = 1\n", "numpy/_core.so": b"A"}
    files_b = {"numpy/__pycache__/__init__.cpython-311.pyc": b"pyc-b", "numpy/core/__init__.py": b"",
               "numpy/__init__.py": b"b = 1\n", "numpy/_core.so": b"B"}
    pair(venv, "numpy", dict(common, **files_a), dict(common, **files_b), top_level=["numpy"])
    assert owners(venv) == {"numpy": {"distributions": ["numpy-a", "numpy-b"], "shared_files": 2,
                                      "on_disk": ["numpy-b"]}}


def test_record_rows_without_size_or_hash(venv):
    """RECORD rows without a size: the size on disk decides (an empty __init__.py stays a namespace file); a shared
    file gone from disk still counts as shared; an owner whose row has no hash is not 'on disk'."""
    pair(venv, "ns", {"ns/__init__.py": b""}, {"ns/__init__.py": b""})
    pair(venv, "lib", {"lib/core.py": b"a = 1\n", "lib/gone.py": b"g"},
         {"lib/core.py": b"b = 1\n", "lib/gone.py": b"g"})
    site = sp(venv)
    (site / "lib" / "gone.py").unlink()
    for di in sorted(site.glob("*.dist-info")):
        rows = (di / "RECORD").read_text().splitlines()
        edited = []
        for row in rows:
            path, digest, _size = row.split(",")
            if di.name.startswith("lib_a") and path == "lib/core.py":
                digest = ""
            edited.append("%s,%s," % (path, digest))
        write_record(di, edited)
    assert owners(venv) == {"lib": {"distributions": ["lib-a", "lib-b"], "shared_files": 2, "on_disk": []}}
    (site / "lib" / "gone.py").write_bytes(b"g")
    assert owners(venv)["lib"]["on_disk"] == ["lib-b"]


def test_unknown_hash_algorithm_is_not_a_match(venv):
    pair(venv, "odd", {"odd/__init__.py": b"a = 1\n"}, {"odd/__init__.py": b"b = 1\n"})
    di = sp(venv) / "odd_b-1.0.dist-info"
    rows = (di / "RECORD").read_text().splitlines()
    write_record(di, [row.replace("sha256=", "md7=") if row.startswith("odd/") else row for row in rows])
    assert owners(venv)["odd"]["on_disk"] == []


def test_symlinked_install_is_compared_through_the_link(venv, tmp_path):
    """uv --link-mode=symlink: site-packages holds links into a cache; the last writer still matches."""
    pair(venv, "linked", {"linked/__init__.py": b"a = 1\n"}, {"linked/__init__.py": b"b = 1\n"})
    cache = tmp_path / "cache"
    cache.mkdir()
    target = sp(venv) / "linked" / "__init__.py"
    (cache / "__init__.py").write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(cache / "__init__.py")
    assert owners(venv)["linked"]["on_disk"] == ["linked-b"]


def test_on_disk_is_judged_by_the_20_smallest_shared_files(venv):
    """Files are listed largest first; a change in the 21st smallest goes unseen, one in the 20th does not."""
    for name, count in (("big", 21), ("mid", 20)):
        files = {"%s/f%02d.py" % (name, i): b"x" * (100 - i) for i in range(count)}
        pair(venv, name, files, files)
        (sp(venv) / name / "f00.py").write_bytes(b"y" * 100)
    got = owners(venv)
    assert got["big"] == {"distributions": ["big-a", "big-b"], "shared_files": 21, "on_disk": ["big-a", "big-b"]}
    assert got["mid"] == {"distributions": ["mid-a", "mid-b"], "shared_files": 20, "on_disk": []}


def test_on_disk_hashes_files_up_to_1_mib(venv):
    """A shared file of exactly 1 MiB is compared; a larger one is not (a change in it goes unseen)."""
    pair(venv, "exact", {"exact/data.bin": b"A" * MIB}, {"exact/data.bin": b"B" * MIB},
         top_level=["exact"])
    pair(venv, "huge", {"huge/__init__.py": b"a = 1\n", "huge/blob.bin": b"A" * (MIB + 1)},
         {"huge/__init__.py": b"b = 1\n", "huge/blob.bin": b"B" * (MIB + 1)})
    (sp(venv) / "huge" / "blob.bin").write_bytes(b"C" * (MIB + 1))
    got = owners(venv)
    assert got["exact"]["on_disk"] == ["exact-b"]
    assert got["huge"] == {"distributions": ["huge-a", "huge-b"], "shared_files": 2, "on_disk": ["huge-b"]}


def test_scripts_in_bin_are_no_import_name(venv):
    """Without top_level.txt, a ``.py`` script RECORD places in the venv's bin/ (docutils' rst2html.py) gives no
    ``..`` import name, so two such distributions do not "share" it (Python 3.12 leaves out names with a dot)."""
    for name in ("docutils", "docutils-fork"):
        di = T.add_dist(venv, name, "1.0", {"docutils/__init__.py": b"name = %r\n" % name})
        with open(di / "RECORD", "a") as record:
            record.write("../../../bin/rst2html.py,,10\n../../../share/docutils/tool.py,,5\n")
    dists = scan(venv)
    assert dists["docutils"]["top_level"] == ["docutils"] and dists["docutils-fork"]["top_level"] == ["docutils"]
    assert D.import_owners(str(sp(venv)), dists) == {
        "docutils": {"distributions": ["docutils", "docutils-fork"], "shared_files": 1, "on_disk": ["docutils-fork"]}}
