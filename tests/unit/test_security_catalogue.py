"""Every row of docs/security.md's table of root's actions names the assertions that prove its
rule, and `make test` runs them.

A row (first cell S<n>) names them in backticks in the last cell, in the reliability catalogue's
forms (catalogue_refs.py): a test function (`test_security.py::test_name`, then bare `test_…` names
for more tests of the same file) or a molecule task or case (`faults: "rollback to a release outside
the layout"`). A file or a scenario alone names no assertion and fails.
"""
from __future__ import annotations

import pytest
from catalogue_refs import REPO, check_cell, table_rows

PAGE = REPO / "docs" / "security.md"
ROWS = [(row, cell) for row, _action, cell in table_rows(PAGE, r"S\d+")]


def test_the_table_is_numbered():
    assert [r for r, _cell in ROWS] == [f"S{i}" for i in range(1, len(ROWS) + 1)]
    assert len(ROWS) >= 8


@pytest.mark.parametrize(("row", "cell"), ROWS, ids=[r for r, _c in ROWS])
def test_each_row_names_assertions_that_make_test_runs(row, cell):
    check_cell(row, cell)
