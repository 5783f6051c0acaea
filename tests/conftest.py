"""Shared pytest fixtures for dflash.deploy.

- Puts `tests/support` on sys.path (shared test helpers).
- Puts `.collections` (made by `make setup`) on sys.path so tests import the
  collection as Ansible does: `ansible_collections.dflash.deploy.plugins...`.
- `fixture_build`: the fixture packages built from tests/fixtures/ (built on
  first use, incremental afterwards) — wheelhouse, simple index, driver.
- `make_venv`: a factory for throw-away uv venvs installed from that
  wheelhouse with no network (`--no-index --find-links`).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COLLECTIONS = REPO / ".collections"
FIXTURE_OUT = Path(os.environ.get("DFLASH_FIXTURE_OUT", REPO / "build" / "fixtures"))
UV = Path(os.environ.get("DFLASH_UV", REPO / ".tools" / "uv" / "bin" / "uv"))

if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
# tests/support: helpers shared by unit and integration tests (abi_native builds real ELF files with gcc,
# transplant_support makes venvs and runs site_packages_transplant)
SUPPORT = REPO / "tests" / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))


def _build_fixtures() -> Path:
    subprocess.run(
        [sys.executable, str(REPO / "tests" / "fixtures" / "build.py"), "--out", str(FIXTURE_OUT)],
        check=True,
    )
    return FIXTURE_OUT


@pytest.fixture(scope="session")
def fixture_build() -> Path:
    """Path of the built fixture tree (wheelhouse/, simple/, driver/, ...)."""
    return _build_fixtures()


@pytest.fixture(scope="session")
def uv_bin() -> Path:
    if not UV.exists():
        pytest.fail(f"uv not found at {UV}: run `make setup` first")
    return UV


@pytest.fixture
def make_venv(tmp_path_factory, fixture_build, uv_bin):
    """make_venv(["torch==2.11.0+cu130", ...], name="v", no_deps=False) -> venv Path."""

    def _make(requirements, name="venv", no_deps=False, python=sys.executable):
        venv = tmp_path_factory.mktemp(name) / "venv"
        subprocess.run([str(uv_bin), "venv", "--quiet", "--python", python, str(venv)], check=True)
        # Copies, not uv's default hardlinks/clones from its cache: tests damage
        # installed files on purpose, and an in-place write through a hardlink
        # would damage uv's cache (and every later venv made from it).
        if requirements:
            cmd = [
                str(uv_bin), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                "--no-index", "--find-links", str(fixture_build / "wheelhouse"), "--link-mode", "copy",
            ]
            if no_deps:
                cmd.append("--no-deps")
            subprocess.run(cmd + list(requirements), check=True)
        return venv

    return _make
