"""preload: the collection's filter and action plugins imported in the controller process, so the task
workers Ansible forks from it find them instead of compiling them again."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from ansible_collections.dflash.deploy.plugins.plugin_utils.preload import plugin_modules, preload
from conftest import COLLECTIONS


def test_plugin_modules_lists_each_types_python_files_and_skips_private_and_doc_files(tmp_path):
    (tmp_path / "filter").mkdir()
    (tmp_path / "action").mkdir()
    for name in ("filter/b.py", "filter/a.py", "filter/_private.py", "filter/a.yml", "action/push.py"):
        (tmp_path / name).write_text("")
    assert plugin_modules(str(tmp_path)) == ["filter.a", "filter.b", "action.push"]
    assert plugin_modules(str(tmp_path), ("lookup",)) == []


def test_a_plugin_that_fails_to_import_is_named_and_the_others_still_load(tmp_path):
    class Root:
        __path__ = [str(tmp_path)]

    (tmp_path / "filter").mkdir()
    for name in ("good.py", "bad.py"):
        (tmp_path / "filter" / name).write_text("")
    imported = []

    def importer(name):
        if name == "pkg":
            return Root
        if name.endswith(".bad"):
            raise SyntaxError("invalid syntax")
        imported.append(name)
        return object()

    assert preload("pkg", importer=importer) == {"loaded": ["filter.good"],
                                                 "failed": {"filter.bad": "SyntaxError: invalid syntax"}}
    assert imported == ["pkg.filter.good"]


# In a fresh interpreter with Ansible's own collection loader: which of the collection's files the collection
# loader compiles from source while the filter loader resolves two filters (of two files), with and without
# preload before. (The filter files themselves Ansible loads from their paths; what they import, the
# module_utils and plugin_utils, goes through the collection loader, which keeps no bytecode.)
PROBE = textwrap.dedent("""
    import json, sys
    from ansible.plugins.loader import filter_loader, init_plugin_loader
    from ansible.utils.collection_loader import _collection_finder as F
    init_plugin_loader([sys.argv[1]])
    if sys.argv[2] == "1":
        from ansible_collections.dflash.deploy.plugins.plugin_utils.preload import preload
        assert not preload()["failed"]
    compiled, get_code = [], F._AnsibleCollectionPkgLoaderBase.get_code
    def counting(self, fullname):
        compiled.append(fullname)
        return get_code(self, fullname)
    F._AnsibleCollectionPkgLoaderBase.get_code = counting
    names = ("dflash.deploy.rollout_readiness", "dflash.deploy.verify_imports")
    found = [filter_loader.get(n) is not None for n in names]
    print(json.dumps({"found": found, "compiled": compiled}))
""")


def _probe(preloaded: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(COLLECTIONS), "1" if preloaded else "0"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def test_after_preload_the_filter_loader_resolves_the_collections_filters_without_compiling_a_file():
    cold, warm = _probe(False), _probe(True)
    assert cold["found"] == warm["found"] == [True, True]
    assert "ansible_collections.dflash.deploy.plugins.plugin_utils.rollout" in cold["compiled"]
    assert warm["compiled"] == []
