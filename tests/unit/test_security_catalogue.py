"""Every row of docs/security.md's table of root's actions names tests that exist.

A row (first cell S<n>) names its tests in backticks in the last cell: a file under tests/
(`test_security.py`) with a test in it (`file.py::test_name`), a bare test name for one more
test in the file named before it, or a molecule scenario (`faults`).
"""
from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "security.md"


def rows():
    out = []
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(r"S\d+", cells[0]):
            out.append((cells[0], cells[-1]))
    return out


def defined_tests(path):
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


ROWS = rows()


def test_the_table_is_numbered():
    assert [r for r, _cell in ROWS] == [f"S{i}" for i in range(1, len(ROWS) + 1)]
    assert len(ROWS) >= 8


@pytest.mark.parametrize(("row", "cell"), ROWS, ids=[r for r, _c in ROWS])
def test_each_row_names_tests_that_exist(row, cell):
    refs = re.findall(r"`([^`]+)`", cell)
    assert refs, f"{row} names no test"
    scenarios = {p.parent.name for p in (REPO / "extensions" / "molecule").glob("*/molecule.yml")}
    current = None
    for ref in refs:
        file_part, _sep, func = ref.partition("::")
        if file_part.startswith("test_") and not file_part.endswith(".py"):
            assert current is not None, f"{row}: {ref} follows no file"
            func = ref
        elif file_part.endswith(".py"):
            found = sorted((REPO / "tests").rglob(file_part))
            assert len(found) == 1, f"{row}: {file_part}: {len(found)} files of that name under tests/"
            current = found[0]
        else:
            assert ref in scenarios, f"{row}: {ref} is neither a test file nor a molecule scenario"
            continue
        if func:
            assert fnmatch.filter(defined_tests(current), func), f"{row}: no {func} in {current.relative_to(REPO)}"
