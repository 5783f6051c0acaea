"""The module mutants (`make mutate`, pyproject.toml [tool.dflash-mutate]) still apply to the code as it is now.

cosmic-ray names a mutant by its file and the code it changes: a file moved or split, or a test file renamed,
would otherwise drop out of the score without a word.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("mutate", REPO / "tests" / "unit" / "mutation" / "mutate.py")
mutate = importlib.util.module_from_spec(_spec)
sys.modules["mutate"] = mutate
_spec.loader.exec_module(mutate)


def test_every_file_and_test_of_the_table_is_there():
    conf = mutate.load()
    assert mutate.problems(conf) == []


def test_abi_checks_steps_are_all_mutated():
    """abi_check's logic was one file; each step now has its own, and every one of them stays in the table."""
    files = mutate.load()["files"]
    steps = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "plugins/module_utils/abicheck").glob("*.py"))
    assert steps and [s for s in steps if s not in files] == []
    assert "plugins/module_utils/abi_check.py" in files and "plugins/modules/abi_check.py" in files


def test_a_missing_file_or_test_is_named(tmp_path):
    (tmp_path / "a.py").write_text("")
    (tmp_path / "t.py").write_text("")
    conf = {"files": {"a.py": ["t.py", "--deselect=t.py::test_x", "gone.py", "--deselect=gone.py::t"],
                      "b.py": ["t.py::test_y"]}}
    assert mutate.problems(conf, root=tmp_path) == [
        "a.py: test gone.py: no such file", "a.py: test gone.py::t: no such file", "b.py: no such file"]
