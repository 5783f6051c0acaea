"""pkg_probe's reading of installed distributions against the standard library and pip, on real venvs.

Every distribution of each venv is compared, none left out: name, version,
Requires-Dist (in file order), top-level import names and RECORD rows as
``importlib.metadata`` reports them when run by that venv's own interpreter;
RECORD paths as pip reads them; unsatisfied requirements as pip's own check
(``pip._internal.operations.check``, what ``pip check`` runs) finds them.

The toolchain venv (``.venv``, made by ``make setup`` from PyPI) is always
compared.  Venvs downloaded from PyPI by hand are compared when they exist:
``DFLASH_REAL_VENVS`` (colon-separated; default ``/tmp/realtorch``, the
benchmark venv of ``make bench``).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.pkg_probe import probe_distributions
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import distributions as D
from ansible_collections.dflash.deploy.plugins.module_utils.pydist import requirements as R
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.dist_info import normalize_name
from ansible_collections.dflash.deploy.plugins.module_utils.pydist.venv import locate

REPO = Path(__file__).resolve().parents[5]
TOOLCHAIN_VENV = REPO / ".venv"
UV = Path(os.environ.get("DFLASH_UV", REPO / ".tools" / "uv" / "bin" / "uv"))


def _extra_venvs():
    out = []
    for path in os.environ.get("DFLASH_REAL_VENVS", "/tmp/realtorch").split(":"):
        if not path:
            continue
        present = (Path(path) / "pyvenv.cfg").is_file() and (Path(path) / "bin" / "python").exists()
        out.append(pytest.param(Path(path), id=path, marks=() if present else pytest.mark.skip(
            reason="%s does not exist (a venv installed from PyPI by hand; see the module docstring)" % path)))
    return out


VENVS = [pytest.param(TOOLCHAIN_VENV, id="toolchain-venv")] + _extra_venvs()

# Run by the venv's own interpreter: what importlib.metadata reports there.
IMPORTLIB_VIEW = r"""
import json, sys
from importlib import metadata as M
site = sys.argv[1]
tops = {}
for top, names in M.packages_distributions().items():
    for name in names:
        tops.setdefault(name, set()).add(top)
out = []
for dist in M.distributions():
    path = str(dist._path)
    files = [[str(f), "%s=%s" % (f.hash.mode, f.hash.value) if f.hash else "", f.size] for f in (dist.files or [])]
    out.append({"path": path, "name": dist.metadata["Name"], "version": dist.version,
                "requires": dist.requires or [], "files": files,
                "top_level": sorted(tops.get(dist.metadata["Name"], ()))})
json.dump(out, sys.stdout)
"""

# Run by the venv's interpreter with only the pip package added to sys.path.
PIP_VIEW = r"""
import json, sys
sys.path.append(sys.argv[1])
from pip._internal.metadata import get_default_environment
from pip._internal.operations.check import check_package_set, create_package_set_from_installed
records = {}
for dist in get_default_environment().iter_installed_distributions(local_only=False, skip=()):
    entries = dist.iter_declared_entries()
    records[str(dist.canonical_name)] = None if entries is None else list(entries)
package_set, _problems = create_package_set_from_installed()
missing, conflicting = check_package_set(package_set)
problems = [[str(d), str(n), "missing"] for d, rows in missing.items() for n, _req in rows]
problems += [[str(d), str(n), "conflict"] for d, rows in conflicting.items() for n, _v, _req in rows]
json.dump({"records": records, "problems": problems}, sys.stdout)
"""


def _python(venv: Path) -> str:
    return str(venv / "bin" / "python")


def _site(venv: Path) -> str:
    return locate(str(venv))["site_packages"]


def importlib_view(venv: Path):
    proc = subprocess.run([_python(venv), "-I", "-c", IMPORTLIB_VIEW, _site(venv)], capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def pip_dir(tmp_path_factory):
    """A directory holding only the pip package (no dist-info), from any interpreter that has pip."""
    for python in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if not python:
            continue
        proc = subprocess.run([python, "-I", "-c", "import os, pip; print(os.path.dirname(pip.__file__))"],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            out = tmp_path_factory.mktemp("pip-only")
            (out / "pip").symlink_to(proc.stdout.strip())
            return out
    pytest.skip("no interpreter here has pip, so pip's reading cannot be compared")


def pip_view(venv: Path, pip_dir: Path):
    proc = subprocess.run([_python(venv), "-I", "-c", PIP_VIEW, str(pip_dir)], capture_output=True, text=True,
                          check=True)
    return json.loads(proc.stdout)


def _by_dist_info(dists):
    return dict((os.path.basename(d["dist_info"]), d) for d in dists.values())


@pytest.mark.parametrize("venv", VENVS)
def test_every_distribution_matches_importlib_metadata(venv):
    theirs = importlib_view(venv)
    site = _site(venv)
    # importlib.metadata finds distributions on the whole sys.path; with -I that is the venv's site-packages
    # and the standard library, so every one of them must be a dist-info there (pkg_probe reads only those).
    assert all(os.path.dirname(t["path"]) == site and t["path"].endswith(".dist-info") for t in theirs), [
        t["path"] for t in theirs if os.path.dirname(t["path"]) != site or not t["path"].endswith(".dist-info")]
    ours = _by_dist_info(D.scan(site))
    assert sorted(ours) == sorted(os.path.basename(t["path"]) for t in theirs)
    tops = {}
    for dist in ours.values():  # packages_distributions() groups by the Name field, so compare grouped the same
        tops.setdefault(dist["name"], set()).update(dist["top_level"])
    mismatches = []
    for t in theirs:
        mine = ours[os.path.basename(t["path"])]
        got = {"name": mine["name"], "version": mine["version"], "requires": mine["requires"],
               "files": [[p, h, s] for p, h, s in mine["record"]], "top_level": sorted(tops[mine["name"]])}
        want = dict((k, t[k]) for k in got)
        if got != want:
            mismatches.append((t["path"], dict((k, (got[k], want[k])) for k in got if got[k] != want[k])))
    assert mismatches == []
    print("%s: %d distributions equal to importlib.metadata's reading, %d requirements, %d RECORD rows" % (
        venv, len(theirs), sum(len(t["requires"]) for t in theirs), sum(len(t["files"]) for t in theirs)))


@pytest.mark.parametrize("venv", VENVS)
def test_record_and_unsatisfied_match_pip(venv, pip_dir):
    theirs = pip_view(venv, pip_dir)
    site = _site(venv)
    dists = D.scan(site)
    for key, dist in dists.items():
        # pip yields str(pathlib.Path(row[0])): the same normalized path, for every row
        assert [p for p, _h, _s in dist["record"]] == theirs["records"][key.split("#")[0]], key
    ours = probe_distributions(locate(str(venv)))["unsatisfied"]
    got = sorted(set((normalize_name(u["distribution"]), normalize_name(R.requirement_name(u["requirement"])),
                      u["problem"]) for u in ours))
    assert got == sorted(set(tuple(p) for p in theirs["problems"]))
    print("%s: %d unsatisfied, as pip's check finds" % (venv, len(got)))


@pytest.fixture(scope="module")
def thinned_venv(tmp_path_factory):
    """A venv holding the toolchain venv's real dist-info directories, every third distribution left out.

    Real Requires-Dist lines (extras, platform and Python-version markers) then point at missing
    distributions, which is where evaluating markers and extras matters.
    """
    venv = tmp_path_factory.mktemp("thinned") / "venv"
    subprocess.run([str(UV), "venv", "--quiet", "--offline", "--python", sys.executable, str(venv)], check=True)
    src = _site(TOOLCHAIN_VENV)
    dest = _site(venv)
    infos = sorted(n for n in os.listdir(src) if n.endswith(".dist-info"))
    for i, name in enumerate(infos):
        if i % 3 != 2:
            shutil.copytree(os.path.join(src, name), os.path.join(dest, name))
    return venv


def test_markers_and_extras_as_pip_evaluates_them(thinned_venv, pip_dir):
    theirs = sorted(set(tuple(p) for p in pip_view(thinned_venv, pip_dir)["problems"]))
    res = probe_distributions(locate(str(thinned_venv)))
    got = sorted(set((normalize_name(u["distribution"]), normalize_name(R.requirement_name(u["requirement"])),
                      u["problem"]) for u in res["unsatisfied"]))
    assert len(theirs) > 10  # the test is about something
    assert got == theirs
    # and the markers decided something here: some requirement of a present distribution is behind a marker
    # (extra or environment) that is false, and is not reported although its target is missing
    present = set(D.scan(_site(thinned_venv)))
    skipped = [r for key, d in D.scan(_site(thinned_venv)).items() for r in d["requires"]
               if ";" in r and normalize_name(R.requirement_name(r)) not in present
               and (key, normalize_name(R.requirement_name(r)), "missing") not in theirs]
    assert skipped, "no requirement behind a false marker among the real metadata"
    print("thinned toolchain venv: %d unsatisfied as pip finds them; %d requirements behind false markers skipped"
          % (len(got), len(skipped)))


SGLANG_VENV = Path(os.environ.get("DFLASH_SGLANG_VENV", "/tmp/realsg"))


@pytest.mark.skipif(not list(SGLANG_VENV.glob("lib/python3*/site-packages/sglang-0.5.9.dist-info/METADATA")),
                    reason="no venv with PyPI's sglang 0.5.9 at %s (made with: uv venv %s; uv pip install "
                           "--no-deps sglang==0.5.9 sglang-kernel==0.4.2 torch==2.11.0)" % (SGLANG_VENV, SGLANG_VENV))
def test_real_sglang_wants_another_torch_and_kernel():
    """PyPI's sglang 0.5.9 (its License field runs over continuation lines holding only spaces) beside torch 2.11.0."""
    res = probe_distributions(locate(str(SGLANG_VENV)))
    sglang = res["distributions"]["sglang"]
    assert sglang["version"] == "0.5.9" and len(sglang["requires"]) == 97
    unsat = dict((u["requirement"].split(";")[0].strip(), u) for u in res["unsatisfied"]
                 if u["distribution"] == "sglang")
    torch = res["distributions"].get("torch")
    assert unsat["torch==2.9.1"]["problem"] == ("conflict" if torch else "missing")
    assert unsat["torch==2.9.1"]["installed"] == (torch["version"] if torch else None)
    if "sgl-kernel" not in res["distributions"]:
        assert unsat["sgl-kernel==0.3.21"] == {"distribution": "sglang", "version": "0.5.9",
                                               "requirement": "sgl-kernel==0.3.21", "installed": None,
                                               "problem": "missing"}
    # behind an extra nobody asked for: not reported although missing
    behind_extra = [r for r in sglang["requires"] if "extra ==" in r]
    assert behind_extra and not any(r.split(";")[0].strip() in unsat for r in behind_extra)
    # behind a marker true on this host (linux x86_64): reported
    assert "torchcodec==0.8.0" in unsat
