#!/usr/bin/env python3
"""The sha256 of every file of the versions the collection names by default, shipped with sglang_venv and
sglang_router.

    .venv/bin/python tools/default_stack_hashes.py           # rewrite both roles' vars/main.yml (network)
    .venv/bin/python tools/default_stack_hashes.py --check   # exit 1 if either differs from what would be written

The versions are read from the roles' defaults, the only place they are named: in
roles/sglang_venv/defaults/main.yml ``sglang==<sglang_venv_sglang_version>`` (``dflash_source=upstream``, the
default) and the ``name==version`` of ``sglang_venv_overlay_base`` (``dflash_source=overlay``, extras left
out), written to roles/sglang_venv/vars/main.yml; in roles/sglang_router/defaults/main.yml
``sglang-router==<sglang_router_version>``, written to roles/sglang_router/vars/main.yml, which the router's
install checks its own lock against. kernel_pin names no version (its pins are the DFlash source's
declaration).

For each version, one call (two versions of one name in one call are a conflict)::

    uv pip compile --no-deps --generate-hashes --universal --no-config --no-header --no-annotate -

with ``name==version`` on stdin, against uv's own default index: the index is named nowhere, and
the variables that would name one (UV_INDEX_URL, UV_DEFAULT_INDEX, UV_INDEX, UV_EXTRA_INDEX_URL,
UV_FIND_LINKS, UV_NO_INDEX; --no-config: uv.toml) are left out of uv's environment. uv lists the
sha256 of every file the index serves for a pinned version, each platform's wheels and the sdist
(checked on 2026-12-07 against the index's own file list: sglang 0.5.11 eight wheels, no sdist;
sglang 0.5.9 one wheel and the sdist); ``--universal`` makes the call independent of this
machine's interpreter and platform (sglang 0.5.11 has Linux wheels only, CPython 3.10 to 3.13).

The file holds ``_sglang_venv_default_stack_hashes: {"name==version": [sha256 hex, ...]}`` (keys as
the lock_hashes filter normalizes them, hashes sorted), which tasks/lock_hashes.yml counts as one more
known source while ``sglang_venv_default_stack_hashes`` is true. ``--check`` keeps the file's own
"Generated" line (date and uv version) and compares the rest, so it fails only on other hashes, or
on a version in the defaults that the file does not name (run the tool after changing a default).
The uv that runs is ``--uv``, else ``$UV``, else .tools/uv/bin/uv, else ``uv`` on the PATH.
"""
from __future__ import annotations

import argparse
import datetime
import difflib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
ROLE = REPO / "roles" / "sglang_venv"
SHIPPED = ROLE / "vars" / "main.yml"
VARIABLE = "_sglang_venv_default_stack_hashes"
COMPILE = ["pip", "compile", "--no-deps", "--generate-hashes", "--universal", "--no-config", "--no-header",
           "--no-annotate", "--quiet", "-"]
# uv's environment without anything that names an index: the file records uv's own default index.
UNSET = ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_NO_INDEX",
         "UV_CONFIG_FILE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS")
GENERATED = re.compile(r"^# Generated .*$", re.M)

_spec = importlib.util.spec_from_file_location("dflash_lock_hashes_tool",
                                               REPO / "plugins" / "filter" / "lock_hashes.py")
lock_hashes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lock_hashes)


def default_pins(defaults: Path = ROLE / "defaults" / "main.yml") -> list[str]:
    """The ``name==version`` the role's defaults name, normalized as the lock_hashes filter keys them."""
    d = yaml.safe_load(defaults.read_text())
    pins = ["sglang==" + str(d["sglang_venv_sglang_version"]), str(d["sglang_venv_overlay_base"])]
    keys = []
    for pin in pins:
        m = lock_hashes._PIN.match(pin)
        if not m:
            raise SystemExit(f"default_stack_hashes: {pin!r} is not name==version")
        keys.append(lock_hashes._key(m.group(1), m.group(2)))
    return sorted(set(keys))


ROUTER_ROLE = REPO / "roles" / "sglang_router"
ROUTER_SHIPPED = ROUTER_ROLE / "vars" / "main.yml"
ROUTER_VARIABLE = "_sglang_router_default_hashes"


def router_pins(defaults: Path = ROUTER_ROLE / "defaults" / "main.yml") -> list[str]:
    """``sglang-router==<sglang_router_version>``, normalized as the lock_hashes filter keys it."""
    version = str(yaml.safe_load(defaults.read_text())["sglang_router_version"])
    return [lock_hashes._key("sglang-router", version)]


def find_uv(given: str | None) -> str:
    for candidate in (given, os.environ.get("UV"), str(REPO / ".tools" / "uv" / "bin" / "uv"), shutil.which("uv")):
        if candidate and Path(candidate).is_file():
            return candidate
    raise SystemExit("default_stack_hashes: no uv (--uv PATH, $UV, .tools/uv/bin/uv or uv on the PATH)")


def uv_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env.update(UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1")
    return env


def hashes_of(uv: str, key: str) -> list[str]:
    """Every sha256 uv's default index serves for ``key`` (name==version)."""
    proc = subprocess.run([uv, *COMPILE], input=key + "\n", env=uv_env(), capture_output=True, text=True,
                          check=False, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"default_stack_hashes: uv pip compile {key} failed (rc {proc.returncode}):\n{proc.stderr}")
    table = lock_hashes.lock_hashes(proc.stdout)
    if list(table) != [key] or not table[key]:
        raise SystemExit(f"default_stack_hashes: uv pip compile {key} gave {table!r}, not the hashes of {key}")
    return table[key]


_FOOTER = ["# (per version: `uv pip compile --no-deps --generate-hashes --universal`, uv's own default index).",
           "# Not edited by hand: `.venv/bin/python tools/default_stack_hashes.py --check` compares it with the",
           "# index, and tests/unit/test_default_stack_hashes.py with the defaults and the GPU kit's pins."]


def _render(header: list, variable: str, table: dict, generated: str) -> str:
    """A role's vars file of hashes: its header, the Generated line, how it was made, then the table."""
    lines = ["---", *header, generated, *_FOOTER, f"{variable}:"]
    for key in sorted(table):
        lines.append(f'  "{key}":')
        lines += [f"    - {h}" for h in sorted(table[key])]
    return "\n".join(lines) + "\n"


VENV_HEADER = [
    "# sglang_venv's internal variables: role vars outrank the inventory; sglang_venv_default_stack_hashes",
    "# (false leaves these out) and sglang_venv_pinned_hashes (added to them) are the operator's.",
    "#",
    "# The sha256 of every file (each platform's wheels and the sdist) that uv's own default index serves",
    "# for the versions the collection names by default (defaults/main.yml: sglang_venv_sglang_version,",
    "# sglang_venv_overlay_base). tasks/lock_hashes.yml counts them as one more known source while",
    "# sglang_venv_default_stack_hashes is true, so the first host of the first fleet refuses other bytes",
    "# under these names and versions too."]
ROUTER_HEADER = [
    "# sglang_router's internal variables: role vars outrank the inventory; sglang_router_default_hashes",
    "# (false leaves these out) is the operator's.",
    "#",
    "# The sha256 of every file (each platform's wheels and the sdist) that uv's own default index serves",
    "# for the router version the collection names by default (defaults/main.yml: sglang_router_version).",
    "# tasks/install_lock.yml refuses a router lock with other bytes under that name and version while",
    "# sglang_router_default_hashes is true."]


def render(table: dict, generated: str) -> str:
    return _render(VENV_HEADER, VARIABLE, table, generated)


def render_router(table: dict, generated: str) -> str:
    return _render(ROUTER_HEADER, ROUTER_VARIABLE, table, generated)


def generated_line(uv: str, day: str) -> str:
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.split()
    return (f"# Generated {day} with uv {version[1] if len(version) > 1 else '?'} by "
            "`.venv/bin/python tools/default_stack_hashes.py`")


def shipped_table(text: str, variable: str = VARIABLE) -> dict:
    return (yaml.safe_load(text) or {}).get(variable) or {}


def one_file(uv: str, args, shipped: Path, variable: str, pins, renderer) -> int:
    """Write (or --check) one role's file of hashes; 0, or 1 when --check finds it differs."""
    table = {key: hashes_of(uv, key) for key in pins()}
    old = shipped.read_text() if shipped.exists() else ""
    line = GENERATED.search(old)
    # The date and uv version change only with the hashes (--check compares everything else).
    keep = line and (args.check or shipped_table(old, variable) == table)
    new = renderer(table, line.group(0) if keep else generated_line(uv, args.date))
    summary = ", ".join(f"{k} ({len(v)} files)" for k, v in table.items())
    where = shipped.relative_to(REPO)
    if args.check:
        if new != old:
            sys.stderr.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(where),
                                                       "what tools/default_stack_hashes.py would write"))
            print(f"{where} differs from uv's default index: run tools/default_stack_hashes.py", file=sys.stderr)
            return 1
        print(f"{where} is up to date: {summary}")
        return 0
    if new != old:
        shipped.parent.mkdir(exist_ok=True)
        shipped.write_text(new)
    print(f"{'wrote' if new != old else 'unchanged'} {where}: {summary}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the shipped file differs from what would be written")
    p.add_argument("--uv", help="the uv to run")
    p.add_argument("--date", default=datetime.date.today().isoformat(), help="the date the header names (YYYY-MM-DD)")
    args = p.parse_args(argv)
    uv = find_uv(args.uv)
    rc = one_file(uv, args, SHIPPED, VARIABLE, default_pins, render)
    return max(rc, one_file(uv, args, ROUTER_SHIPPED, ROUTER_VARIABLE, router_pins, render_router))

if __name__ == "__main__":
    sys.exit(main())
