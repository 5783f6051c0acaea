"""Every socket the collection makes a process listen on has its row in docs/security.md's socket table.

The rule reads the address and port flags (`--host`, `--port`, `--prometheus-host`, ...) that the roles'
templates hand a process; each must be named, in backticks, by a row L<n> of the table, and each row's
last cell names assertions that exist and that `make test` runs (catalogue_refs.check_cell). A template
that gains a listener without a row fails the build:
`test_a_listener_flag_without_a_row_is_found` shows the rule catching one.
"""
from __future__ import annotations

import re
import shlex

import pytest
from catalogue_refs import REPO, check_cell, table_rows
from test_sglang_router_role import exec_start, render

PAGE = REPO / "docs" / "security.md"
ROWS = table_rows(PAGE, r"L\d+")
TEMPLATES = sorted((REPO / "roles").glob("*/templates/*.j2"))
LISTENER_FLAG = re.compile(r"(?<![\w-])(--(?:[a-z][a-z0-9-]*-)?(?:host|port))(?![\w-])")


def listener_flags(text: str) -> set:
    """The address and port flags a template's text hands a process."""
    return set(LISTENER_FLAG.findall(text))


def rows_naming(flag: str) -> list:
    return [row for row, process, _cell in ROWS if f"`{flag}`" in process]


def test_the_table_is_numbered_and_each_row_names_a_process_and_its_flags():
    assert [row for row, _p, _c in ROWS] == [f"L{i}" for i in range(1, len(ROWS) + 1)]
    assert len(ROWS) >= 3
    for row, process, _cell in ROWS:
        assert listener_flags(process), f"{row} names no flag"


@pytest.mark.parametrize("template", TEMPLATES, ids=[f"{t.parent.parent.name}/{t.name}" for t in TEMPLATES])
def test_every_listener_flag_of_a_template_has_its_row(template):
    missing = [f for f in sorted(listener_flags(template.read_text())) if not rows_naming(f)]
    assert not missing, f"{template.relative_to(REPO)} hands a process {missing}: add its row to {PAGE.name}'s " \
                        "socket table (who reaches it, what protects it, the test)"


def test_the_templates_hand_out_the_listeners_the_table_knows():
    """The rule has something to read: the launcher's and the router's flags are found."""
    found = set().union(*(listener_flags(t.read_text()) for t in TEMPLATES))
    assert {"--host", "--port", "--prometheus-host", "--prometheus-port"} <= found


def test_a_listener_flag_without_a_row_is_found():
    """The rule on a deliberately broken copy: a metrics port added to the launcher has no row."""
    launcher = (REPO / "roles" / "sglang_service" / "templates" / "sglang-dflash-launch.j2").read_text()
    broken = launcher.replace('--port "$SGLANG_PORT"', '--port "$SGLANG_PORT" --metrics-port 9100')
    assert broken != launcher
    assert [f for f in listener_flags(broken) if not rows_naming(f)] == ["--metrics-port"]
    assert not listener_flags("--health-check-endpoint /health --worker-urls $W --hostname-override x")


@pytest.mark.parametrize(("row", "cell"), [(r, c) for r, _p, c in ROWS], ids=[r for r, _p, _c in ROWS])
def test_each_row_names_assertions_that_make_test_runs(row, cell):
    check_cell(row, cell)


def test_the_launcher_binds_the_instance_s_own_host_and_port():
    """L1: the server listens where the instance's env file says, and nowhere the launcher picks itself."""
    launcher = (REPO / "roles" / "sglang_service" / "templates" / "sglang-dflash-launch.j2").read_text()
    words = shlex.split(" ".join(line.rstrip("\\") for line in launcher.splitlines()
                                 if "--host" in line or "--port" in line))
    assert words[words.index("--host") + 1] == "$SGLANG_HOST"
    assert words[words.index("--port") + 1] == "$SGLANG_PORT"
    assert [w for w in words if LISTENER_FLAG.fullmatch(w)] == ["--host", "--port"]


def test_the_router_metrics_listen_on_the_loopback_unless_an_address_is_named():
    """L3: the metrics carry no authentication, so by default only the host's own users reach them."""
    args = exec_start(render())
    assert args[args.index("--prometheus-host") + 1] == "127.0.0.1"
    assert args[args.index("--prometheus-port") + 1] == "29000"
    args = exec_start(render(sglang_router_prometheus_host="192.0.2.10"))
    assert args[args.index("--prometheus-host") + 1] == "192.0.2.10"
