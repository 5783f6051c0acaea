"""pydist/requirements.py: how a requirement is judged (markers, pre-releases, odd versions) and the uv fallback."""
from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import requirements as R


def _dists(requires, **installed):
    out = {"a": {"name": "a", "version": "1.0", "requires": list(requires)}}
    for key, version in installed.items():
        out[key.replace("_", "#")] = {"name": key.split("_")[0], "version": version, "requires": []}
    return out


def _problems(dists, **kw):
    return [(u["requirement"], u["problem"]) for u in R.check_with_packaging(dists, **kw)]


def test_markers_use_the_venvs_python_version():
    dists = _dists(['b; python_version < "3.0"'])
    assert _problems(dists, python_version="2.7.18") == [('b; python_version < "3.0"', "missing")]
    assert _problems(dists, python_version="3.11.7") == []
    assert R.marker_environment("3.12.1")["python_version"] == "3.12"


def test_an_installed_prerelease_satisfies_a_plain_specifier():
    assert _problems(_dists(["b>=1.0"], b="1.1rc1")) == []
    assert _problems(_dists(["b>=1.2"], b="1.1rc1")) == [("b>=1.2", "conflict")]


def test_a_version_that_is_not_pep440_is_compared_not_crashed_on():
    assert _problems(_dists(["b>=1"], b="weird-build")) == [("b>=1", "conflict")]


def test_a_marker_that_cannot_be_evaluated_is_reported_and_the_next_requirement_still_checked():
    res = R.check_with_packaging(_dists(['b; python_version ~= "abc"', "c"]))
    assert [u["problem"].split(":")[0] for u in res] == ["marker not evaluable", "missing"]


def test_an_invalid_requirement_is_reported_and_the_next_one_still_checked():
    res = R.check_with_packaging(_dists(["b >>= 1", "c"]))
    assert [(u["requirement"], u["problem"].split(":")[0]) for u in res] == [
        ("b >>= 1", "invalid requirement"), ("c", "missing")]


def test_a_duplicate_distribution_key_still_counts_as_installed():
    assert _problems(_dists(["b>=1"], b_2="1.5")) == []


@pytest.fixture
def fake_uv(tmp_path):
    def make(rc, *lines):
        uv = tmp_path / "uv"
        uv.write_text("#!/bin/sh\nprintf '%%s\\n' %s\nexit %d\n" % (" ".join("'%s'" % line for line in lines), rc))
        uv.chmod(0o755)
        return str(uv)
    return make


def test_uv_pip_check_verdicts(fake_uv):
    dists = _dists(["b>=2"], b="1.0")
    line = "The package `a` requires `b>=2`, but `1.0` is installed"
    found, err = R.check_with_uv(fake_uv(1, line), "python", dists)
    assert err is None and [(u["distribution"], u["installed"], u["problem"]) for u in found] == [
        ("a", "1.0", "conflict")]
    assert R.check_with_uv(fake_uv(0, "All installed packages are compatible"), "python", dists) == ([], None)
    assert R.check_with_uv(fake_uv(2, "warning: first", "error: boom"), "python", dists) == (
        [], "uv pip check failed (rc 2): error: boom")
    found, err = R.check_with_uv(str(fake_uv(0, "x")) + "-missing", "python", dists)
    assert found == [] and err.startswith("uv pip check could not run: [Errno 2]")
    assert R.check_with_uv(fake_uv(1, "something else"), "python", dists)[1] == (
        "uv pip check failed (rc 1): something else")


def test_without_packaging_uv_is_used_only_with_an_interpreter(monkeypatch, fake_uv):
    monkeypatch.setattr(R, "HAS_PACKAGING", False)
    dists = _dists([])
    assert R.check(dists, uv=fake_uv(0, "ok"), python=None)["method"] is None
    assert R.check(dists, uv=None, python="python")["method"] is None
    assert R.check(dists, uv=fake_uv(0, "ok"), python="python") == {"method": "uv", "unsatisfied": [], "error": None}


def test_a_dependency_installed_without_a_version_does_not_hide_the_next_requirement():
    res = R.check_with_packaging(_dists(["b>=1", "c"], b=""))
    assert [(u["requirement"], u["problem"].split(":")[0]) for u in res] == [
        ("b>=1", "installed without a version"), ("c", "missing")]


@pytest.fixture
def without_packaging(monkeypatch):
    """requirements.py as imported by an interpreter that has no ``packaging``."""
    import importlib.util
    import sys
    monkeypatch.setitem(sys.modules, "packaging.markers", None)  # `import` of it raises ImportError
    spec = importlib.util.spec_from_file_location("requirements_without_packaging", R.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_host_without_packaging_falls_back_to_uv(without_packaging, fake_uv):
    line = "The package `a` requires `b>=2`, but `1.0` is installed"
    dists = _dists(["b>=2"], b="1.0")
    res = without_packaging.check(dists, uv=fake_uv(1, line), python="python")
    assert res == {"method": "uv", "error": None, "unsatisfied": [
        {"distribution": "a", "version": "1.0", "requirement": "b>=2", "installed": "1.0", "problem": "conflict"}]}
    assert without_packaging.check(dists)["error"].startswith("requirements not checked: the Python package "
                                                              "'packaging' is not importable")


def test_uv_pip_check_that_hangs_is_given_60_seconds(without_packaging, fake_uv, monkeypatch):
    monkeypatch.setattr(without_packaging, "run_with_timeout", lambda argv, timeout, merge_stderr=False: (
        -9, "", "", True))
    res = without_packaging.check(_dists([]), uv=fake_uv(0, "ok"), python="python")
    assert res == {"method": "uv", "unsatisfied": [], "error": "uv pip check could not run: timed out after 60s"}


def test_a_version_that_is_not_pep440_is_a_conflict_on_older_packaging_too(monkeypatch):
    """packaging 22-25 raise InvalidVersion where 26 compares the text (checked against packaging 22.0, 24.0
    and 25.0): the host's packaging must not turn the verdict into a crash."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    newer = SpecifierSet.contains

    def contains_as_before_26(self, item, prereleases=None, installed=None):
        if not isinstance(item, Version):
            raise InvalidVersion("Invalid version: %r" % item)
        return newer(self, item, prereleases=prereleases)

    assert _problems(_dists(["b===weird-build"], b="weird-build")) == []  # packaging 26: `===` matches the text
    monkeypatch.setattr(SpecifierSet, "contains", contains_as_before_26)
    assert _problems(_dists(["b>=1"], b="weird-build")) == [("b>=1", "conflict")]
    assert _problems(_dists(["b===weird-build"], b="weird-build")) == [("b===weird-build", "conflict")]
    assert _problems(_dists(["b>=1"], b="1.5")) == []
