# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Root's programs are found only where nobody but root could have put them (round 3's N1): a directory
on PATH that someone else controls is passed over, and so is a file someone else could change."""
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


@as_root
def test_a_path_directory_someone_else_controls_is_passed_over(tmp_path, monkeypatch):
    os.chmod(tmp_path, 0o755)
    monkeypatch.setattr(P, "SYSTEM_DIRS", (str(tmp_path / "usr-bin"),))
    planted = _program(tmp_path / "usr-local-sbin")
    system = _program(tmp_path / "usr-bin")
    path_env = f"{planted.parent}:{system.parent}"
    assert P.find_program("systemctl", path_env) == str(planted)  # root's alone: taken
    os.chown(planted.parent, NOBODY, -1)
    assert P.find_program("systemctl", path_env) == str(system)  # the service user's directory: passed over
    os.chown(planted.parent, 0, -1)
    planted.parent.chmod(0o777)
    assert P.find_program("systemctl", path_env) == str(system)  # others may write it
    planted.parent.chmod(0o755)
    tmp_path.chmod(0o777)
    assert P.find_program("systemctl", path_env) is None  # a directory above both that others may write
    tmp_path.chmod(0o1777)
    assert P.find_program("systemctl", path_env) == str(planted)  # sticky above, as /tmp
    assert P.find_program("systemctl", "") == str(system)  # the system's directories after PATH
    assert P.find_program("../usr-bin/systemctl", path_env) is None and P.find_program("", path_env) is None


@as_root
def test_only_a_file_root_alone_can_change_is_taken(tmp_path, monkeypatch):
    os.chmod(tmp_path, 0o755)
    monkeypatch.setattr(P, "SYSTEM_DIRS", ())
    first, second = tmp_path / "sbin", tmp_path / "bin"
    ok = _program(second)
    mine = _program(first)
    path_env = f"{first}:{second}"
    assert P.find_program("systemctl", path_env) == str(mine)
    os.chown(mine, NOBODY, -1)
    assert P.find_program("systemctl", path_env) == str(ok)  # someone else's file: passed over
    os.chown(mine, 0, -1)
    mine.chmod(0o757)
    assert P.find_program("systemctl", path_env) == str(ok)  # others may write it
    mine.chmod(0o644)
    assert P.find_program("systemctl", path_env) == str(ok)  # not executable
