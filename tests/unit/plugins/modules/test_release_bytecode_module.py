"""release_bytecode as Ansible runs it: the pyc files appear once, check mode writes nothing, a refusal is one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.dflash.deploy.plugins.module_utils import fingerprint as FP
from ansible_collections.dflash.deploy.plugins.module_utils.host.programs import roots_alone_dir
from ansible_collections.dflash.deploy.plugins.modules import release_bytecode

BASE = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
ROOTS_BASE = (os.geteuid() == 0 and os.stat(BASE).st_uid == 0 and roots_alone_dir(os.path.dirname(BASE))
              and not os.stat(BASE).st_mode & 0o022)


def run_module(args, capsys, check=False):
    with patch_module_args(dict(args, _ansible_check_mode=check)):
        with pytest.raises(SystemExit):
            release_bytecode.main()
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def make_release(tmp_path):
    release = tmp_path / "release"
    subprocess.run([BASE, "-m", "venv", "--without-pip", str(release)], check=True)
    (site,) = release.glob("lib/python3*/site-packages")
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    return release, site


@pytest.mark.skipif(not ROOTS_BASE, reason="needs root and a base interpreter root alone can change")
def test_check_mode_then_a_run_then_a_second_run(tmp_path, capsys):
    release, site = make_release(tmp_path)
    before = FP.fingerprint(str(release))

    dry = run_module({"path": str(release)}, capsys, check=True)
    assert dry["changed"] is True and dry["compiled"] == 1 and dry["interpreter"] == BASE
    assert FP.fingerprint(str(release)) == before

    done = run_module({"path": str(release), "jobs": 1}, capsys)
    assert done["changed"] is True and done["compiled"] == 1 and done["error_count"] == 0
    assert (site / "pkg" / "__pycache__" / ("__init__.%s.pyc" % sys.implementation.cache_tag)).stat().st_uid == 0
    compiled = FP.fingerprint(str(release))
    assert compiled != before

    again = run_module({"path": str(release), "jobs": 1}, capsys)
    assert again["changed"] is False and again["compiled"] == 0
    assert FP.fingerprint(str(release)) == compiled
    assert run_module({"path": str(release)}, capsys, check=True)["changed"] is False


@pytest.mark.parametrize("check", [False, True])
def test_a_copied_interpreter_inside_the_release_is_refused_in_check_mode_too(tmp_path, capsys, check):
    release, site = make_release(tmp_path)
    (release / "bin" / "python").unlink()
    (release / "bin" / "python").write_text("#!/bin/sh\n/usr/bin/touch %s\n" % (tmp_path / "ran"))
    (release / "bin" / "python").chmod(0o755)
    result = run_module({"path": str(release)}, capsys, check=check)
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("refusing to compile %s: its bin/python resolves to" % release)
    assert not (tmp_path / "ran").exists() and not list(site.rglob("*.pyc"))


def test_negative_jobs_are_refused(tmp_path, capsys):
    result = run_module({"path": str(tmp_path), "jobs": -1}, capsys)
    assert result["failed"] is True
    assert result["msg"] == "jobs must be 0 or more and timeout 1 or more (got -1 and 1800)"
