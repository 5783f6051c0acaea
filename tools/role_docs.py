#!/usr/bin/env python3
"""Write each role README's variables section from its meta/argument_specs.yml.

    python tools/role_docs.py          # rewrite the sections
    python tools/role_docs.py --check  # exit 1 if a README differs from its argument_specs

The section sits between the markers below, so the prose around it is the author's and the
variables are the spec's: the two cannot drift (tests/unit/test_role_docs.py runs --check).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
BEGIN = "<!-- variables: generated from meta/argument_specs.yml by tools/role_docs.py -->"
END = "<!-- end of variables -->"


def _text(value) -> str:
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    return " ".join(str(value or "").split()).replace("|", "\\|")


def _default(spec: dict) -> str:
    if "default" not in spec:
        return "required" if spec.get("required") else ""
    value = spec["default"]
    if isinstance(value, str) and "\n" not in value:
        return f"`{value}`" if value else '`""`'
    if isinstance(value, (bool, int, float)) or value is None:
        return f"`{json.dumps(value)}`"
    flow = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return f"`{flow.removesuffix('...').strip()}`"


def section(role: Path) -> str:
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    lines = [BEGIN, "", "## Variables", ""]
    for entry, spec in specs.items():
        options = spec.get("options") or {}
        if not options:
            continue
        lines += [f"Entry point `{entry}`: {_text(spec.get('short_description'))}", "",
                  "| variable | type | default | description |", "|---|---|---|---|"]
        for name, opt in options.items():
            kind = opt.get("type", "str")
            if kind == "list" and opt.get("elements"):
                kind = f"list of {opt['elements']}"
            if opt.get("choices"):
                kind += " (" + ", ".join(map(str, opt["choices"])) + ")"
            lines.append(f"| `{name}` | {kind} | {_default(opt)} | {_text(opt.get('description'))} |")
            for sub, sopt in (opt.get("options") or {}).items():
                lines.append(f"| `{name}[].{sub}` | {sopt.get('type', 'str')} | {_default(sopt)} | "
                             f"{_text(sopt.get('description'))} |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def render(readme: str, generated: str) -> str:
    if BEGIN in readme and END in readme:
        head, rest = readme.split(BEGIN, 1)
        return head + generated + rest.split(END, 1)[1]
    return readme.rstrip("\n") + "\n\n" + generated + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    stale = []
    for role in sorted((REPO / "roles").iterdir()):
        if not (role / "meta" / "argument_specs.yml").is_file():
            continue
        readme = role / "README.md"
        old = readme.read_text() if readme.exists() else f"# dflash.deploy.{role.name}\n"
        new = render(old, section(role))
        if new != old:
            stale.append(readme.relative_to(REPO))
            if not args.check:
                readme.write_text(new)
    if args.check and stale:
        print("role READMEs differ from their argument_specs (run tools/role_docs.py): "
              + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
