# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Root's programs are found by absolute path in the system's directories, never on PATH, and only
where nobody but root could have put them (round 3's N1)."""
from __future__ import annotations

import os

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.host import programs as P

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


def _program(directory, name="systemctl"):
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\ntouch \"$0.ran\"\n")
    path.chmod(0o755)
    return path


def test_path_is_never_searched(tmp_path, monkeypatch):
    planted = _program(tmp_path / "usr-local-sbin")
    monkeypatch.setenv("PATH", f"{planted.parent}:/usr/bin:/bin")
    monkeypatch.setattr(P, "SYSTEM_DIRS", (str(tmp_path / "usr-sbin"), str(tmp_path / "usr-bin")))
    assert P.find_program("systemctl") is None
    system = _program(tmp_path / "usr-bin")
    assert P.find_program("systemctl") == str(system)
    assert P.find_program("../usr-local-sbin/systemctl") is None and P.find_program("") is None


@as_root
def test_only_a_file_root_alone_can_change_is_taken(tmp_path):
    os.chmod(tmp_path, 0o755)
    first, second = tmp_path / "sbin", tmp_path / "bin"
    ok = _program(second)
    mine = _program(first)
    dirs = (str(first), str(second))
    assert P.find_program("systemctl", dirs) == str(mine)
    os.chown(mine, NOBODY, -1)
    assert P.find_program("systemctl", dirs) == str(ok)  # someone else's file: skipped
    os.chown(mine, 0, -1)
    mine.chmod(0o757)
    assert P.find_program("systemctl", dirs) == str(ok)  # others may write it: skipped
    mine.chmod(0o755)
    os.chown(first, NOBODY, -1)
    assert P.find_program("systemctl", dirs) == str(ok)  # its directory is someone else's: skipped
    mine.chmod(0o644)
    os.chown(first, 0, -1)
    assert P.find_program("systemctl", dirs) == str(ok)  # not executable
