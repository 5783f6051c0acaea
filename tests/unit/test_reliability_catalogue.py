"""Every row of docs/reliability.md names the assertion that fails when its promise breaks, and
`make test` runs it.

The last cell names, in backticks, molecule tasks or cases (`faults: "port taken by another service"`)
and test functions (`test_transplant_crash.py::test_kill9_at_random_moments`); catalogue_refs.py says
what each form must resolve to. A scenario or a file alone no longer passes.
"""
from __future__ import annotations

import pytest
from catalogue_refs import (
    REPO,
    check_cell,
    make_test_pytest_dirs,
    make_variable,
    name_matches,
    scenario_assertions,
    scenario_files,
    table_rows,
)

CATALOGUE = REPO / "docs" / "reliability.md"
ROWS = [(int(n), case, cell) for n, case, cell in table_rows(CATALOGUE, r"\d+")]


def test_the_catalogue_is_numbered_and_long_enough():
    numbers = [n for n, _case, _test in ROWS]
    assert numbers == list(range(1, len(numbers) + 1)), numbers
    assert len(numbers) >= 30


@pytest.mark.parametrize(("number", "case", "cell"), ROWS, ids=[f"row{n}" for n, _c, _t in ROWS])
def test_row_names_assertions_that_make_test_runs(number, case, cell):
    check_cell(f"row {number} ({case})", cell)


def test_the_checker_reads_what_it_checks():
    """The parsing above finds the stages, scenarios and names it relies on, and refuses what it must
    (a regex that matched nothing would let every row pass)."""
    assert "tests/unit" in make_test_pytest_dirs()
    assert "tests/chain" in make_test_pytest_dirs()
    assert "default" in make_variable("MOLECULE_SCENARIOS") and "faults" in make_variable("MOLECULE_TWIN_DEFAULT")
    # the files a scenario runs: its playbooks and the task files they include, not utils/
    files = {p.relative_to(REPO).as_posix() for p in scenario_files("faults")}
    assert {"extensions/molecule/faults/converge.yml", "extensions/molecule/faults/verify.yml",
            "extensions/molecule/faults/tasks/case.yml"} <= files
    assert not [f for f in files if "/utils/" in f]
    names, values = scenario_assertions("faults")
    assert "port taken by another service" in names                      # a case of the looped include
    assert "The outcome is the expected one" in names                    # a task of the included file
    assert "Keep it" not in names                                        # set_fact cannot fail
    assert "Fault and bad-input catalogue against a healthy ct200" not in names   # a play
    names, values = scenario_assertions("host_failure")
    written = "The kill left this phase unfinished at {{ _point }}"
    assert written in names
    assert name_matches(written, "The kill left this phase unfinished at build", values)
    assert not name_matches(written, "The kill left this phase unfinished at nowhere", values)


@pytest.mark.parametrize(("cell", "error"), [
    ("`faults`", "names no assertion"),
    ("`test_transplant_crash.py`", "names no assertion"),
    ('`faults: "port taken by someone"`', "no task or case named"),
    ('`faults: "Keep it"`', "no task or case named"),
    ('`nosuch: "x"`', "no molecule scenario"),
    ("`test_transplant_crash.py::test_no_such_test`", "no test test_no_such_test"),
    ("`test_05_*`", "no file named before it"),
    ("`tests/lab/conftest.py::test_x`", "no test test_x"),
    ("`tools/lab/lab.py::main`", "not under a directory make test runs"),
    ("no backticks", "names no assertion"),
])
def test_the_checker_refuses_a_reference_to_nothing(cell, error):
    with pytest.raises(AssertionError, match=error):
        check_cell("row X", cell)


def test_the_checker_accepts_each_form():
    cell = ('`faults: "port taken by another service"`; `host_failure: "Assert at upgrade"`; '
            "`test_transplant_hostile.py::test_02_*`, `test_05_*`; "
            "`tests/chain/test_incident_chain.py::test_c_cu13_kernel_beside_cu128_torch_misses_libcudart13`")
    assert check_cell("row X", cell) == 5
