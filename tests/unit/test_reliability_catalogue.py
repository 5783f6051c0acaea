"""Every row of docs/reliability.md names a test that exists and that `make test` runs.

A row's last column names its tests in backticks: a molecule scenario (`faults`), a
test file or directory (`tests/chain`, `test_transplant_crash.py`, a bare name is looked
up under tests/), or a test in a file (`file.py::test_name`, `file.py::test_08_*`). A
scenario must be in the Makefile's MOLECULE_SCENARIOS; a file must sit under a
directory one of the Makefile's pytest stages runs; a named test must be defined in it.
The letters after `tests/chain` ("(a, a2)") name its test_<letter>_ functions.
"""
from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = REPO / "docs" / "reliability.md"
MAKEFILE = REPO / "Makefile"


def catalogue_rows():
    """(number, case, test cell) of each table row whose first cell is a number."""
    rows = []
    for line in CATALOGUE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0].isdigit():
            rows.append((int(cells[0]), cells[1], cells[-1]))
    return rows


def make_variable(name):
    text = MAKEFILE.read_text().replace("\\\n", " ")
    match = re.search(rf"^{name}\s*[?:]?=\s*(.*)$", text, re.M)
    assert match, f"Makefile has no {name}"
    return match.group(1).split()


def make_test_pytest_dirs():
    """The directories the pytest stages of `make test` run (`pytest -q tests/…`)."""
    stages = set(make_variable("TEST_STAGES"))
    dirs = []
    for stage in stages:
        recipe = re.search(rf"^{re.escape(stage)}:.*\n((?:\t.*\n)+)", MAKEFILE.read_text(), re.M)
        if recipe:
            dirs += re.findall(r"pytest -q (tests/[\w/]+)", recipe.group(1))
    return sorted(set(dirs))


def scenarios():
    return sorted(p.parent.name for p in (REPO / "extensions" / "molecule").glob("*/molecule.yml"))


def defined_tests(path):
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("test")}


def resolve(ref, last_file=None):
    """A backticked reference -> (kind, path or scenario, test pattern or None).
    A bare test name (`test_05_*`) is a test in the file the row named before it."""
    if ref.startswith("test_") and not ref.partition("::")[0].endswith(".py"):
        assert last_file is not None, f"{ref}: a test name with no file named before it"
        return "path", last_file, ref
    file_part, _sep, func = ref.partition("::")
    if "/" not in file_part and not file_part.endswith(".py"):
        return "scenario", file_part, None
    candidate = REPO / file_part
    if not candidate.exists() and "/" not in file_part:
        found = sorted((REPO / "tests").rglob(file_part))
        assert len(found) == 1, f"{file_part}: {len(found)} files of that name under tests/"
        candidate = found[0]
    return "path", candidate, func or None


ROWS = catalogue_rows()


def test_the_catalogue_is_numbered_and_long_enough():
    numbers = [n for n, _case, _test in ROWS]
    assert numbers == list(range(1, len(numbers) + 1)), numbers
    assert len(numbers) >= 30


@pytest.mark.parametrize(("number", "case", "cell"), ROWS, ids=[f"row{n}" for n, _c, _t in ROWS])
def test_row_names_tests_that_make_test_runs(number, case, cell):
    refs = re.findall(r"`([^`]+)`", cell)
    assert refs, f"row {number} ({case}) names no test in backticks: {cell!r}"
    molecule = set(make_variable("MOLECULE_SCENARIOS"))
    known = set(scenarios())
    pytest_dirs = [REPO / d for d in make_test_pytest_dirs()]
    last_file = None
    for ref in refs:
        kind, target, func = resolve(ref, last_file)
        if kind == "scenario":
            assert target in known, f"row {number}: no molecule scenario {target!r} ({sorted(known)})"
            assert target in molecule, f"row {number}: scenario {target} is not in MOLECULE_SCENARIOS"
            continue
        assert target.exists(), f"row {number}: {ref} does not exist"
        last_file = target if target.is_file() else None
        assert any(target == d or d in target.parents for d in pytest_dirs), \
            f"row {number}: {ref} is not under a directory make test runs ({make_test_pytest_dirs()})"
        if func:
            names = defined_tests(target)
            assert fnmatch.filter(names, func), f"row {number}: no test {func} in {target.relative_to(REPO)}"
    for letters in re.findall(r"`tests/chain` \(([^)]*)\)", cell):
        names = set().union(*(defined_tests(p) for p in (REPO / "tests" / "chain").glob("test_*.py")))
        for letter in re.split(r",\s*", letters):
            assert any(n.startswith(f"test_{letter}_") for n in names), \
                f"row {number}: no tests/chain test_{letter}_…"


def test_the_checker_reads_what_it_checks():
    """The parsing above finds the stages and scenarios it relies on (a regex that
    matched nothing would let every row pass)."""
    assert "tests/unit" in make_test_pytest_dirs()
    assert "tests/chain" in make_test_pytest_dirs()
    assert {"faults", "default"} <= set(make_variable("MOLECULE_SCENARIOS"))
    kind, target, func = resolve("test_transplant_crash.py::test_kill9_at_random_moments")
    assert kind == "path" and target.name == "test_transplant_crash.py" and func
