"""The product-layer mutants (`make mutate-roles`) still apply to the code as it is now.

Each break in tests/unit/mutation/roles_mutants.yml is an exact text that must occur once in its
file; a renamed task or a reworded line would otherwise make the mutant silently vanish from the score.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "mutate_roles", Path(__file__).resolve().parent / "mutation" / "mutate_roles.py")
mutate_roles = importlib.util.module_from_spec(_spec)
sys.modules["mutate_roles"] = mutate_roles  # its dataclasses look their module up
_spec.loader.exec_module(mutate_roles)


def test_every_mutant_applies_once_and_names_known_checks():
    mutants = mutate_roles.load()
    assert len(mutants) >= 17
    assert mutate_roles.problems(mutants) == []


def test_a_mutant_whose_text_is_gone_or_twice_is_named(tmp_path):
    (tmp_path / "a.yml").write_text("x: 1\nx: 1\n")
    catalogue = tmp_path / "m.yml"
    catalogue.write_text(
        "- {id: twice, why: w, edits: [{file: a.yml, find: 'x: 1', replace: ''}], checks: [molecule default]}\n"
        "- {id: gone, why: w, edits: [{file: b.yml, find: 'y', replace: ''}], checks: [pytest x]}\n")
    assert mutate_roles.problems(mutate_roles.load(catalogue), root=tmp_path) == [
        "twice: a.yml: the text to change is there 2 times",
        "gone: b.yml: no such file",
        "gone: check 'pytest x' is not 'molecule <scenario>', 'lab <node>' or 'unit <node>'"]


def test_the_score_counts_what_ran():
    mutants = mutate_roles.load()[:3]
    results = {mutants[0].id: {"outcome": "killed", "by": "molecule faults", "seconds": 500},
               mutants[1].id: {"outcome": "survived", "by": None, "seconds": 90}}
    assert mutate_roles.score(results, mutants).splitlines()[0] == "1/2 killed (50%), 1 not run"
