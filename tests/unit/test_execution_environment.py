"""The execution-environment definition: what ansible-builder reads from the collection, and the example.

ansible-builder 3 reads meta/execution-environment.yml of every collection in an EE and merges the
Python and system requirements it names (checked by hand with `ansible-builder introspect` on the
installed tarball: docs/execution-environment.md). These tests keep the files it points at present and parseable.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
META = yaml.safe_load((REPO / "meta" / "execution-environment.yml").read_text())
BINDEP = re.compile(r"^[a-z0-9][a-z0-9.+-]* \[(platform:(dpkg|rpm) ?)+\]$")


def lines(path: Path) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def test_the_collection_metadata_names_files_that_exist():
    assert META["version"] == 1
    for kind in ("python", "system"):
        assert (REPO / META["dependencies"][kind]).is_file(), kind


def test_python_requirements_parse_and_uv_is_the_version_setup_uses():
    reqs = {r.name: r for r in map(Requirement, lines(REPO / META["dependencies"]["python"]))}
    setup = (REPO / "tools" / "setup.sh").read_text()
    uv_version = re.search(r"^UV_VERSION=(\S+)$", setup, re.M).group(1)
    assert str(reqs["uv"].specifier) == f"=={uv_version}"


def test_every_system_requirement_is_a_bindep_line_for_both_families():
    entries = lines(REPO / META["dependencies"]["system"])
    assert all(BINDEP.match(e) for e in entries), entries
    families = {f for e in entries for f in re.findall(r"platform:(\w+)", e)}
    assert families == {"dpkg", "rpm"}
    assert any(e.startswith("tar ") for e in entries)


def test_the_example_ee_installs_the_collection_from_its_tarball():
    example = REPO / "examples" / "execution-environment"
    ee = yaml.safe_load((example / "execution-environment.yml").read_text())
    assert ee["version"] == 3
    galaxy = yaml.safe_load((example / ee["dependencies"]["galaxy"]).read_text())
    [collection] = galaxy["collections"]
    tarball = [f["src"] for f in ee["additional_build_files"]]
    assert collection["type"] == "file" and Path(collection["name"]).name in tarball


def test_the_example_ee_refuses_a_context_without_the_tarball():
    """ansible-builder copies a missing additional_build_files src silently: the galaxy stage checks for the
    file the galaxy requirements install, before installing, and names what to do."""
    example = REPO / "examples" / "execution-environment"
    ee = yaml.safe_load((example / "execution-environment.yml").read_text())
    galaxy = yaml.safe_load((example / ee["dependencies"]["galaxy"]).read_text())
    [collection] = galaxy["collections"]
    [step] = ee["additional_build_steps"]["prepend_galaxy"]
    assert step.startswith("RUN test -s %s ||" % collection["name"]) and "exit 1" in step
    assert "ansible-galaxy collection build" in step
    assert ee["dependencies"]["ansible_core"]["package_pip"].startswith("ansible-core>=2.19,<2.22")
