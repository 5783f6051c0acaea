"""release.bytecode: which interpreter root may run to compile a release, and what compileall left behind."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils import fingerprint as FP
from ansible_collections.dflash.deploy.plugins.module_utils.host.layout import read_layout
from ansible_collections.dflash.deploy.plugins.module_utils.host.programs import roots_alone_dir
from ansible_collections.dflash.deploy.plugins.module_utils.release import bytecode as BC

BASE = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
ROOTS_BASE = (os.geteuid() == 0 and os.stat(BASE).st_uid == 0 and roots_alone_dir(os.path.dirname(BASE))
              and not os.stat(BASE).st_mode & 0o022)
needs_roots_base = pytest.mark.skipif(not ROOTS_BASE, reason="needs root and a base interpreter root alone can change")


def make_release(tmp_path, sources=None):
    """A real venv (``python -m venv``, no pip) holding a small package; (release, site-packages)."""
    release = tmp_path / "release"
    subprocess.run([BASE, "-m", "venv", "--without-pip", str(release)], check=True)
    (site,) = release.glob("lib/python3*/site-packages")
    pkg = site / "pkg"
    pkg.mkdir()
    for name, text in (sources or {"__init__.py": "X = 1\n", "mod.py": "def f():\n    return 2\n"}).items():
        (pkg / name).write_text(text)
    return release, site


def canary_interpreter(path, canary):
    """A program at ``path`` that, if anyone ran it, would leave ``canary`` behind."""
    path.write_text("#!/bin/sh\n/usr/bin/touch %s\n" % canary)
    path.chmod(0o755)


def test_stated_version_reads_uv_and_venv_spellings():
    assert BC.stated_version({"version_info": "3.12.3"}) == (3, 12)
    assert BC.stated_version({"version": "3.11.2"}) == (3, 11)
    assert BC.stated_version({"version_info": "3.13.0.final.0", "version": "2.7"}) == (3, 13)
    assert BC.stated_version({"home": "/usr/bin"}) is None
    assert BC.stated_version({"version": "three"}) is None
    assert BC.stated_version(None) is None


def test_inside_is_the_release_or_below_never_a_sibling_with_the_same_prefix(tmp_path):
    rel = str(tmp_path / "rel")
    assert BC.inside(rel + "/bin/python3.12", rel)
    assert BC.inside(rel, rel)
    assert not BC.inside(rel + "2/bin/python", rel)
    assert not BC.inside("/usr/bin/python3", rel)


def test_parse_errors_names_each_file_once_in_order():
    out = ("*** Error compiling '/r/site/a.py'...\n  File \"/r/site/a.py\", line 1\nSyntaxError: invalid syntax\n"
           "*** Error compiling '/r/site/it\\'s.py'...\nSyntaxError: x\n*** Error compiling '/r/site/a.py'...\n")
    assert BC.parse_errors(out) == ["/r/site/a.py", "/r/site/it's.py"]
    assert BC.parse_errors("Listing '/r/site'...\n") == []


def test_compile_argv_isolates_the_interpreter():
    assert BC.compile_argv("/usr/bin/python3.12", "/r/lib/python3.12/site-packages", 0) == [
        "/usr/bin/python3.12", "-I", "-S", "-m", "compileall", "-q", "-j", "0", "/r/lib/python3.12/site-packages"]


def test_compare_counts_added_rewritten_and_removed():
    before = {"a": (1, 1), "b": (2, 2), "c": (3, 3)}
    after = {"a": (1, 1), "b": (2, 5), "d": (4, 4)}
    assert BC.compare(before, after) == (1, 1, 1)
    assert BC.compare(after, after) == (0, 0, 0)


def test_missing_bytecode_counts_sources_without_their_pyc(tmp_path):
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    for name in ("a.py", "b.py", "data.txt"):
        (tmp_path / "pkg" / name).write_text("")
    assert BC.missing_bytecode(str(tmp_path), "cpython-312") == 2
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-312.pyc").write_bytes(b"")
    (tmp_path / "pkg" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"")
    assert BC.missing_bytecode(str(tmp_path), "cpython-312") == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="a root-owned interpreter needs root to make")
def test_interpreter_problem_wants_root_alone(tmp_path):
    prog = tmp_path / "python"
    prog.write_text("")
    prog.chmod(0o755)
    os.chmod(tmp_path, 0o755)
    for parent in [tmp_path, *tmp_path.parents]:
        if not roots_alone_dir(str(parent)):
            pytest.skip(f"{parent} is not root's alone")
    assert BC.interpreter_problem(str(prog), os.stat(prog)) is None
    prog.chmod(0o775)
    assert "not root's alone" in BC.interpreter_problem(str(prog), os.stat(prog))
    prog.chmod(0o644)
    assert "not an executable regular file" in BC.interpreter_problem(str(prog), os.stat(prog))
    prog.chmod(0o755)
    os.chown(prog, 65534, -1)
    assert "owner uid 65534" in BC.interpreter_problem(str(prog), os.stat(prog))
    os.chown(prog, 0, -1)
    os.chmod(tmp_path, 0o777)
    assert "someone other than root can change" in BC.interpreter_problem(str(prog), os.stat(prog))


def test_a_bin_python_inside_the_release_is_refused_without_running_it(tmp_path):
    release, _site = make_release(tmp_path)
    canary = tmp_path / "ran"
    (release / "bin" / "python").unlink()
    canary_interpreter(release / "bin" / "python", canary)
    with pytest.raises(BC.BytecodeError) as err:
        BC.compile_release(str(release))
    assert str(err.value) == ("refusing to compile %s: its bin/python resolves to %s, inside the release; root runs "
                              "only a base interpreter outside it" % (release, release / "bin" / "python"))
    assert not canary.exists()


def test_a_link_to_an_interpreter_in_a_writable_directory_is_refused_without_running_it(tmp_path):
    release, _site = make_release(tmp_path)
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    canary = tmp_path / "ran"
    canary_interpreter(loose / "python3", canary)
    (release / "bin" / "python").unlink()
    (release / "bin" / "python").symlink_to(loose / "python3")
    with pytest.raises(BC.BytecodeError) as err:
        BC.compile_release(str(release))
    assert str(err.value).startswith("refusing to compile %s with its base interpreter: %s" % (release, loose))
    assert "\n" not in str(err.value)
    assert not canary.exists()


@needs_roots_base
def test_a_venv_of_another_python_version_is_refused(tmp_path):
    release, site = make_release(tmp_path)
    cfg = release / "pyvenv.cfg"
    cfg.write_text("".join(line for line in cfg.read_text().splitlines(True) if not line.startswith("version"))
                   + "version_info = 2.7.18\n")
    with pytest.raises(BC.BytecodeError) as err:
        BC.compile_release(str(release))
    assert str(err.value) == ("refusing to compile %s: its base interpreter %s is Python %d.%d, the venv is 2.7"
                              % ((release, BASE) + tuple(sys.version_info[:2])))
    assert not list(site.rglob("*.pyc"))


@needs_roots_base
def test_compile_writes_roots_pyc_once_and_the_fingerprint_then_stays(tmp_path):
    release, site = make_release(tmp_path, {"__init__.py": "X = 1\n", "mod.py": "def f():\n    return 2\n",
                                            "broken.py": "def (:\n"})
    (site / "zz.pth").write_text("import os; os.system('touch %s')\n" % (tmp_path / "pth-ran"))
    first_fp = FP.fingerprint(str(release))

    old_umask = os.umask(0)  # the caller's umask must not matter: the module compiles under 022
    try:
        first = BC.compile_release(str(release), jobs=2, timeout=120)
    finally:
        os.umask(old_umask)

    tag = sys.implementation.cache_tag
    pycs = sorted(p.name for p in (site / "pkg" / "__pycache__").iterdir())
    assert pycs == ["__init__.%s.pyc" % tag, "mod.%s.pyc" % tag]
    for pyc in (site / "pkg" / "__pycache__").iterdir():
        st = pyc.stat()
        assert st.st_uid == os.getuid() and not st.st_mode & 0o022
    assert not (site / "pkg" / "__pycache__").stat().st_mode & 0o022
    assert first["changed"] is True and first["compiled"] == 2 and first["pyc_after"] == first["pyc_before"] + 2
    assert first["error_count"] == 1 and first["errors"] == [str(site / "pkg" / "broken.py")]
    assert first["interpreter"] == BASE and first["cache_tag"] == tag
    assert not (tmp_path / "pth-ran").exists()  # no site module: the release's .pth files never ran as root
    # the host layout read (layout_info) refuses a release holding a file not root's alone: these are
    assert read_layout(service_user="nobody", service_group="nogroup", release_dirs=[str(tmp_path)]).problems == ()
    second_fp = FP.fingerprint(str(release))
    assert second_fp.sha256 != first_fp.sha256 and second_fp.files == first_fp.files + 2

    second = BC.compile_release(str(release), jobs=2, timeout=120)

    assert second["changed"] is False and second["compiled"] == 0 and second["rewritten"] == 0
    assert FP.fingerprint(str(release)).sha256 == second_fp.sha256


@needs_roots_base
def test_check_mode_runs_nothing_and_estimates_from_missing_pyc(tmp_path):
    release, site = make_release(tmp_path)
    before = FP.fingerprint(str(release))
    estimate = BC.compile_release(str(release), check_mode=True)
    assert estimate["changed"] is True and estimate["compiled"] == 2 and estimate["pyc_after"] is None
    assert FP.fingerprint(str(release)) == before
    BC.compile_release(str(release))
    assert BC.compile_release(str(release), check_mode=True)["changed"] is False


def test_a_failing_compileall_naming_no_file_fails(tmp_path, monkeypatch):
    release, site = make_release(tmp_path)
    monkeypatch.setattr(BC, "base_interpreter", lambda rel: "/bin/false")
    monkeypatch.setattr(BC, "base_version", lambda python, timeout: (tuple(sys.version_info[:2]), "cpython-x"))
    with pytest.raises(BC.BytecodeError) as err:
        BC.compile_release(str(release))
    assert str(err.value) == "compileall over %s exited 1 (0 .pyc written before it stopped): no output" % site
    assert err.value.changed is False


def test_not_a_venv_is_refused_in_one_line(tmp_path):
    with pytest.raises(BC.BytecodeError, match="is not a venv"):
        BC.compile_release(str(tmp_path))
    with pytest.raises(BC.BytecodeError, match="is not a release directory"):
        BC.compile_release(str(tmp_path / "missing"))
    assert stat.S_ISDIR(os.stat(tmp_path).st_mode)
