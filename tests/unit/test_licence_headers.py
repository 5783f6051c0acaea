"""Every Python file the collection ships says the collection's licence (galaxy.yml), not another."""
from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
GPL = "GNU General Public License v3.0+"


def shipped_python():
    files = subprocess.run(["git", "ls-files", "plugins", "roles", "playbooks"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    return [f for f in files if f.endswith(".py") and not f.endswith("__init__.py")]


def test_the_collection_is_gpl():
    assert yaml.safe_load((REPO / "galaxy.yml").read_text())["license"] == ["GPL-3.0-or-later"]


def test_each_plugin_file_names_the_gpl_and_no_other_licence():
    plugins = [f for f in shipped_python() if f.startswith("plugins/")]
    assert plugins
    wrong = [f for f in plugins if GPL not in "".join((REPO / f).read_text().splitlines(True)[:5])
             or "Apache" in "".join((REPO / f).read_text().splitlines(True)[:5])]
    assert wrong == []
