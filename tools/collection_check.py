#!/usr/bin/env python3
"""make collection: the collection as an operator gets it.

Builds the tarball with `ansible-galaxy collection build`, refuses lab and
development files in it (galaxy.yml's build_ignore), installs it offline into
a clean collections path, renders every module, role and filter with
`ansible-doc` from that installed copy, with no checkout configuration in sight
(the work directory is a fresh temporary one, ANSIBLE_CONFIG points at an empty
file), and fails on a relative link of a shipped markdown page that does not
resolve in that copy (a page build_ignore leaves out).
The lab tests that install the collection (tests/lab/test_command_forms.py,
test_readme_operator.py) use `build` and `install` from here.
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = REPO / ".venv" / "bin"

# Paths (relative to the collection root) that must not ship: the lab, dev tooling, the dev docs and dated records,
# and the changelog fragments (ansible-lint on the installed copy, without the checkout's .ansible-lint, takes a
# fragment named like 27-no-playbook-dir-defaults.yml for a playbook and fails).
FORBIDDEN_PREFIXES = (
    "ansible.cfg", "playbooks/ansible.cfg", "inventory/lab.yml", "inventory/twin.yml", "inventory/group_vars/",
    "changelogs/fragments/", "docs/development.md", "docs/lab.md", "docs/testing.md", "docs/validation.md",
    "docs/validation/", "docs/benchmarks.md", "docs/test-runs.md", "docs/mutation-history.md",
    "extensions/", "tools/", "bench/", "build/", "requirements/", "Makefile", "pyproject.toml",
    "tests/lab/", "tests/chain/", "tests/fixtures/", "tests/integration/", "tests/gpu/", "tests/conftest.py",
    "tests/unit/mutation/", "deploy_dflash.yml",
)
# Of inventory/, only the operator's example ships: every other inventory there is the lab's.
INVENTORY_SHIPS = ("inventory/production.example.yml",)
# What an operator needs from it (README: "Deploying to production").
REQUIRED = (
    "MANIFEST.json", "FILES.json", "LICENSE", "README.md", "meta/runtime.yml", "inventory/production.example.yml",
    "playbooks/deploy_dflash.yml", "playbooks/stage_artifacts.yml", "playbooks/audit.yml", "playbooks/rollback.yml",
    # the reference docs the README and the modules' notes point at
    "docs/README.md", "docs/architecture.md", "docs/security.md", "docs/reliability.md", "docs/modules/pkg_probe.md",
    # what ansible-builder reads to build an execution environment (docs/execution-environment.md)
    "meta/execution-environment.yml", "meta/requirements.txt", "meta/bindep.txt", "docs/execution-environment.md",
    # the release notes (the fragments they are written from stay in the source tree)
    "CHANGELOG.md", "changelogs/changelog.yaml", "changelogs/config.yaml",
)


class CollectionError(Exception):
    """A stage of the check failed; the message says which and why."""


def clean_env(work: Path) -> dict:
    """An operator's controller in ``work``: no checkout configuration (ANSIBLE_CONFIG is an empty file)."""
    empty_cfg = work / "empty.cfg"
    empty_cfg.write_text("[defaults]\n")
    return {
        "PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8",
        "ANSIBLE_CONFIG": str(empty_cfg), "ANSIBLE_COLLECTIONS_PATH": str(work / "collections"),
        "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(work / "tmp"),
        "ANSIBLE_HOME": str(work / "ansible-home"),
    }


def run(cmd: list, env: dict, cwd: Path) -> str:
    proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CollectionError(f"{' '.join(map(str, cmd))} failed (rc {proc.returncode})\n"
                              f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def members(tarball: Path) -> list[str]:
    with tarfile.open(tarball) as tar:
        return [m.name.removeprefix("./") for m in tar.getmembers()]


def check_contents(names: list[str]) -> list[str]:
    problems = [f"ships {n}" for n in names
                if any(n == p.rstrip("/") or n.startswith(p) for p in FORBIDDEN_PREFIXES)
                or n.startswith(".") or "__pycache__" in n.split("/") or n.endswith(".pyc")
                or (n.startswith("inventory/") and n not in INVENTORY_SHIPS)]
    problems += [f"lacks {r}" for r in REQUIRED if r not in names]
    return problems


# Markdown links: inline `[text](target "title")`, images `![alt](target)`, reference definitions `[label]: target`.
# Fenced code blocks and code spans hold no link; a code span does not cross a blank line.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?^ {0,3}\1[`~]*[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)")
_REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*(<[^>\n]*>|\S+)", re.M)
_SCHEME = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//)")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.M)


def md_links(text: str) -> list[str]:
    """The relative link targets in markdown ``text``, in order: none with a scheme (https:, mailto:); ``#x`` kept."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    targets = [t.strip("<>") for t in _INLINE.findall(prose) + _REFDEF.findall(prose)]
    return [t for t in targets if t and not _SCHEME.match(t)]


def md_anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of markdown ``text``: lower case, punctuation out, spaces as ``-``,
    a repeated heading's anchor suffixed ``-1``, ``-2``, ..."""
    anchors, counts = set(), {}
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        counts[slug] = counts.get(slug, -1) + 1
        anchors.add(slug if counts[slug] == 0 else f"{slug}-{counts[slug]}")
    return anchors


def link_problem(root: Path, md: Path, target: str) -> str:
    """Why the link ``target`` in the markdown file ``md`` does not resolve inside ``root`` ("" when it does)."""
    path, _, anchor = target.partition("#")
    dest = (md.parent / unquote(path.split("?", 1)[0])).resolve() if path else md.resolve()
    if not dest.is_relative_to(root.resolve()):
        return "outside the collection"
    if not dest.exists():
        return "no such file"
    if anchor and dest.suffix == ".md" and dest.is_file() and unquote(anchor) not in md_anchors(dest.read_text()):
        return "no such heading"
    return ""


def dead_links(root: Path, files: list[Path] | None = None) -> list[str]:
    """Each relative link of the markdown ``files`` (default: every ``*.md`` under ``root``) that does not resolve
    to a file or directory under ``root``, or to a heading of the page it names: ``file: target (why)``."""
    found = []
    for md in sorted(files if files is not None else root.rglob("*.md")):
        for target in md_links(md.read_text()):
            why = link_problem(root, md, target)
            if why:
                found.append(f"{md.relative_to(root)}: {target} ({why})")
    return found


def relinted(names: list[str], config: Path = REPO / ".ansible-lint") -> list[str]:
    """The shipped ``names`` that ansible-lint reads as another kind only through the checkout's ``config`` (its
    ``kinds``), which does not ship: on the installed copy ansible-lint guesses their kind (a changelog fragment
    named ...-playbook-... taken for a playbook) and fails."""
    import yaml  # the toolchain's; this file runs with .venv's Python

    kinds = [(kind, pattern) for entry in yaml.safe_load(config.read_text()).get("kinds") or []
             for kind, pattern in entry.items()]
    return [f"ships {n}, which ansible-lint reads as {kind} only through the checkout's {config.name}"
            for n in names for kind, pattern in kinds if fnmatch.fnmatch("/" + n, pattern)]


def lint_installed(installed: Path, env: dict) -> str:
    """``ansible-lint --offline --profile production`` on the installed copy, with no checkout configuration."""
    proc = subprocess.run([str(VENV_BIN / "ansible-lint"), "--offline", "--profile", "production", "--nocolor"],
                          env=env, cwd=installed, capture_output=True, text=True)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    if proc.returncode != 0:
        raise CollectionError(f"ansible-lint on the installed copy failed (rc {proc.returncode})\n"
                              + "\n".join(lines[-40:]))
    return lines[-1] if lines else ""


def build(output: Path) -> Path:
    """``ansible-galaxy collection build`` of this checkout into ``output``: the tarball.

    Raises CollectionError when the build fails or the tarball ships lab or
    development files or lacks what an operator needs.  The lab tests
    (tests/lab) install this same tarball.
    """
    with tempfile.TemporaryDirectory(prefix="dflash-collection-build.") as tmp:
        env = clean_env(Path(tmp))
        run([VENV_BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", output, REPO], env, tmp)
    tarball = next(Path(output).glob("dflash-deploy-*.tar.gz"))
    problems = check_contents(members(tarball)) + relinted(members(tarball))
    if problems:
        raise CollectionError("the tarball is wrong:\n  " + "\n  ".join(problems))
    return tarball


def install(tarball: Path, collections: Path) -> Path:
    """``ansible-galaxy collection install --offline`` of ``tarball`` into the clean path ``collections``.

    Returns the installed collection's directory; raises CollectionError when
    there is no real installed copy there.
    """
    with tempfile.TemporaryDirectory(prefix="dflash-collection-install.") as tmp:
        env = clean_env(Path(tmp))
        run([VENV_BIN / "ansible-galaxy", "collection", "install", "--offline", "--force", "-p", collections,
             tarball], env, tmp)
    installed = Path(collections) / "ansible_collections" / "dflash" / "deploy"
    if installed.is_symlink() or not (installed / "MANIFEST.json").is_file():
        raise CollectionError(f"no installed copy at {installed}")
    return installed


def render_docs(installed: Path, env: dict, work: Path) -> tuple[list[str], list[str]]:
    """ansible-doc of every module and role from the installed copy: (modules, roles)."""
    modules = sorted(p.stem for p in (installed / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    roles = sorted(p.name for p in (installed / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
    for name in modules:
        out = run([VENV_BIN / "ansible-doc", "-t", "module", f"dflash.deploy.{name}"], env, work)
        if str(installed) not in out and "dflash.deploy" not in out:
            raise CollectionError(f"ansible-doc dflash.deploy.{name} did not render from {installed}")
        if ("EXAMPLES" not in out) or ("RETURN VALUES" not in out):
            raise CollectionError(f"ansible-doc dflash.deploy.{name} lacks EXAMPLES or RETURN VALUES")
    for name in roles:
        out = run([VENV_BIN / "ansible-doc", "-t", "role", f"dflash.deploy.{name}"], env, work)
        if "ENTRY POINT" not in out:
            raise CollectionError(f"ansible-doc -t role dflash.deploy.{name} rendered no entry point")
    listed = run([VENV_BIN / "ansible-doc", "-t", "module", "-l", "dflash.deploy"], env, work)
    missing = [m for m in modules if f"dflash.deploy.{m}" not in listed]
    if missing:
        raise CollectionError(f"ansible-doc -l does not list {missing}")
    return modules, roles


def filter_names(installed: Path) -> list[str]:
    """The names every plugins/filter/*.py file's FilterModule.filters() returns (its dict's string keys)."""
    names = []
    for path in sorted((installed / "plugins" / "filter").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "filters":
                names += [k.value for sub in ast.walk(node) if isinstance(sub, ast.Dict)
                          for k in sub.keys if isinstance(k, ast.Constant)]
    return sorted(names)


def render_filters(installed: Path, env: dict, work: Path) -> list[str]:
    """ansible-doc of every filter from the installed copy: listed with a description, each rendered."""
    names = filter_names(installed)
    listed = json.loads(run([VENV_BIN / "ansible-doc", "-t", "filter", "-l", "--json", "dflash.deploy"], env, work))
    bare = [n for n in names if str(listed.get(f"dflash.deploy.{n}") or "").strip() in ("", "UNDOCUMENTED")]
    if bare:
        raise CollectionError(f"ansible-doc -t filter -l lists no description for {bare}")
    docs = json.loads(run([VENV_BIN / "ansible-doc", "-t", "filter", "--json",
                           *(f"dflash.deploy.{n}" for n in names)], env, work))
    bad = [n for n in names if not (docs.get(f"dflash.deploy.{n}") or {}).get("doc")
           or str(installed) not in str(docs[f"dflash.deploy.{n}"]["doc"].get("filename", ""))]
    if bad:
        raise CollectionError(f"ansible-doc -t filter did not render {bad} from {installed}")
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="build and install under this directory and keep it")
    ap.add_argument("--lint", action="store_true",
                    help="also run ansible-lint (production profile) on the installed copy (about a minute)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dflash-collection.") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        env = clean_env(work)
        try:
            tarball = build(work)
            installed = install(tarball, work / "collections")
            modules, roles = render_docs(installed, env, work)
            filters = render_filters(installed, env, work)
            dead = dead_links(installed)
            if dead:
                raise CollectionError("links that the installed copy does not resolve:\n  " + "\n  ".join(dead))
            if args.lint:
                print(f"collection: ansible-lint on the installed copy: {lint_installed(installed, env)}")
        except CollectionError as exc:
            sys.exit(f"collection: {exc}")
        size = os.path.getsize(tarball)
        print(f"collection: {tarball.name} ({size // 1024} KiB, {len(members(tarball))} entries) has no lab or dev "
              f"files; installed offline; ansible-doc renders {len(modules)} modules ({', '.join(modules)}) and "
              f"{len(roles)} roles ({', '.join(roles)}) and {len(filters)} filters from the installed copy; every "
              f"relative link of its {len(list(installed.rglob('*.md')))} markdown pages resolves there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
