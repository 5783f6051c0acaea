"""Every filter of the collection renders with ansible-doc (issue 43, issue 44's Galaxy importer).

The real ``ansible-doc`` of the venv runs at the repository root, so ansible.cfg's collections_path
(``.collections``, made by ``make setup``) resolves dflash.deploy to this checkout. Each filter that a
plugins/filter/*.py file's FilterModule.filters() returns must be listed with a description, render as
JSON with DOCUMENTATION, EXAMPLES and RETURN, with nothing on stderr (ansible-test sanity's ansible-doc test
fails on a warning), and document the function it names: its options are the function's parameters
(``_input`` first), in order, as ``positional`` says."""
from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
FILTER_FILES = sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.py"))


def _filters() -> dict:
    """{filter name: function} from every filter file's FilterModule."""
    out = {}
    for stem in FILTER_FILES:
        module = importlib.import_module(f"ansible_collections.dflash.deploy.plugins.filter.{stem}")
        out.update(module.FilterModule().filters())
    return out


def _ansible_doc(*args: str) -> dict:
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("ANSIBLE_CONFIG", None)
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    proc = subprocess.run([str(VENV_BIN / "ansible-doc"), "-t", "filter", "--json", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.strip() == "", "ansible-doc warned (ansible-test sanity fails on it): " + proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def filters() -> dict:
    return _filters()


@pytest.fixture(scope="module")
def docs(filters) -> dict:
    return _ansible_doc(*("dflash.deploy." + name for name in sorted(filters)))


def test_the_filter_files_are_read(filters):
    assert len(filters) >= 60 and "fleet_hashes" in filters and "router_unit_instance" in filters


def test_ansible_doc_lists_every_filter_with_a_description(filters):
    listed = _ansible_doc("-l", "dflash.deploy")
    missing = sorted(n for n in filters
                     if str(listed.get("dflash.deploy." + n) or "").strip() in ("", "UNDOCUMENTED"))
    assert missing == [], "ansible-doc -t filter -l dflash.deploy lists no description for %s" % missing


def test_every_filter_renders_with_examples_and_return(filters, docs):
    bad = []
    for name in sorted(filters):
        entry = docs.get("dflash.deploy." + name) or {}
        doc = entry.get("doc") or {}
        if not (doc.get("short_description") and doc.get("description") and entry.get("examples")
                and "_value" in (entry.get("return") or {})):
            bad.append(name)
        elif f"dflash.deploy.{name}" not in entry["examples"] and f"'dflash.deploy.{name}'" not in entry["examples"]:
            bad.append(name + " (its EXAMPLES never call it)")
    assert bad == []


def test_every_filter_documents_its_own_parameters_in_order(filters, docs):
    wrong = []
    for name, func in sorted(filters.items()):
        params = list(inspect.signature(func).parameters)
        doc = docs["dflash.deploy." + name]["doc"]
        positional = [p.strip() for p in str(doc.get("positional") or "").split(",") if p.strip()]
        want = ["_input"] + params[1:]
        if positional != want or sorted(doc.get("options") or {}) != sorted(want):
            wrong.append(f"{name}: documents {positional} / {sorted(doc.get('options') or {})}, takes {want}")
    assert wrong == []
