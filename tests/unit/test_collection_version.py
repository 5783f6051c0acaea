# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The version scheme (docs/development.md, "Releases"): galaxy.yml's version is MAJOR.MINOR.PATCH, never
behind the newest release in changelogs/changelog.yaml, and every release tag of the repository (the bare
version, as `git tag 1.0.0`) names a release that the changelog records at the commit's galaxy.yml version."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


def version_problems(galaxy_version: str, released: list[str], tags: dict[str, str]) -> list[str]:
    """What breaks the scheme: ``released`` are changelog.yaml's release versions, ``tags`` each release tag
    with galaxy.yml's version at the commit it names."""
    problems = []
    if not SEMVER.match(galaxy_version):
        problems.append(f"galaxy.yml's version {galaxy_version!r} is not MAJOR.MINOR.PATCH")
        return problems
    newest = max(released, key=Version, default=None)
    if newest is not None and Version(galaxy_version) < Version(newest):
        problems.append(f"galaxy.yml's version {galaxy_version} is behind the newest release {newest}")
    for tag, at_tag in sorted(tags.items()):
        if tag not in released:
            problems.append(f"tag {tag} names no release in changelogs/changelog.yaml")
        if at_tag != tag:
            problems.append(f"tag {tag} is on a commit whose galaxy.yml says {at_tag}")
    return problems


def test_the_checkout_keeps_the_scheme():
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    released = list((yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text()) or {})
                    .get("releases") or {})
    tags = {}
    listed = subprocess.run(["git", "-C", str(REPO), "tag", "--list"], capture_output=True, text=True, check=False)
    for tag in listed.stdout.split():
        if SEMVER.match(tag):
            text = subprocess.run(["git", "-C", str(REPO), "show", f"{tag}:galaxy.yml"], capture_output=True,
                                  text=True, check=True).stdout
            tags[tag] = str(yaml.safe_load(text)["version"])
    assert version_problems(str(galaxy["version"]), released, tags) == []


def test_a_version_that_is_not_semver_is_refused():
    assert version_problems("1.0", [], {}) == ["galaxy.yml's version '1.0' is not MAJOR.MINOR.PATCH"]
    assert version_problems("v1.0.0", [], {}) == ["galaxy.yml's version 'v1.0.0' is not MAJOR.MINOR.PATCH"]


def test_galaxy_yml_behind_the_newest_release_is_refused():
    assert version_problems("1.2.0", ["1.10.0", "1.2.0"], {}) == [
        "galaxy.yml's version 1.2.0 is behind the newest release 1.10.0"]
    assert version_problems("1.11.0", ["1.10.0", "1.2.0"], {}) == []   # the next release under way


def test_a_tag_without_its_release_or_on_another_version_is_refused():
    assert version_problems("1.1.0", ["1.0.0"], {"1.0.0": "1.0.0", "1.1.0": "1.1.0"}) == [
        "tag 1.1.0 names no release in changelogs/changelog.yaml"]
    assert version_problems("1.1.0", ["1.0.0"], {"1.0.0": "0.9.0"}) == [
        "tag 1.0.0 is on a commit whose galaxy.yml says 0.9.0"]
