"""`make mutate-roles`: break the product layer one way at a time and see whether the tests notice.

Not a test module (pytest collects test_*.py only). The breaks are in roles_mutants.yml beside this
file: each is one or more exact edits to roles, playbooks, templates, host scripts or plugins, and the
checks that must fail when the product is broken that way. Each mutant is applied in a copy of the
checkout (build/mutate/roles-tree: the committed files, .collections' relative link to the copy,
the toolchain and the fixture build shared), its checks run cheapest first, and the first that fails
kills it; the file is put back before the next. Results go to build/mutate/roles.json as they come
(a run that stops resumes where it was, unless MUTATE_ROLES_FRESH=1), and the score to
build/mutate/roles-summary.txt.

    .venv/bin/python tests/unit/mutation/mutate_roles.py            # every mutant
    MUTATE_ROLES=id,id .venv/bin/python tests/unit/mutation/mutate_roles.py
    .venv/bin/python tests/unit/mutation/mutate_roles.py --list

Before the mutants, every check they name runs once on the unmutated copy (the baseline): a check
that fails there would count every mutant as killed, so the run stops. MUTATE_ROLES_BASELINE=0 skips
it when the same commit's `make test` passed (the checks are part of it).

A check is "molecule <scenario>" (the scenario's full test sequence, under tools/lab/session.sh),
"lab <pytest node>" (a lab test, under tools/lab/session.sh) or "unit <pytest node>". The copy is its
own checkout to the lab (lab.py labels containers with the checkout), so a mutant run replaces the
lab of the working tree and must not run beside another lab run.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "build" / "mutate"
TREE = OUT / "roles-tree"
RESULTS = OUT / "roles.json"
MUTANTS = Path(__file__).with_name("roles_mutants.yml")
TIMEOUT = int(os.environ.get("MUTATE_ROLES_TIMEOUT", "1800"))  # per check: the longest scenario takes ~10 min


@dataclass(frozen=True)
class Edit:
    file: str
    find: str
    replace: str


@dataclass(frozen=True)
class Mutant:
    id: str
    why: str
    edits: tuple
    checks: tuple


def load(path: Path = MUTANTS) -> list[Mutant]:
    """The mutants of the catalogue, in its order; each edit's text must occur exactly once in its file."""
    mutants = []
    for entry in yaml.safe_load(path.read_text()):
        edits = tuple(Edit(**e) for e in entry["edits"])
        mutants.append(Mutant(entry["id"], entry["why"], edits, tuple(entry["checks"])))
    return mutants


def problems(mutants: list[Mutant], root: Path = REPO) -> list[str]:
    """One line per edit whose text is not exactly once in its file, and per unknown check kind."""
    out = []
    seen = set()
    for m in mutants:
        if m.id in seen:
            out.append(f"{m.id}: the id is used twice")
        seen.add(m.id)
        for e in m.edits:
            if not (root / e.file).is_file():
                out.append(f"{m.id}: {e.file}: no such file")
                continue
            count = (root / e.file).read_text().count(e.find)
            if count != 1:
                out.append(f"{m.id}: {e.file}: the text to change is there {count} times")
        for check in m.checks:
            if check.split(" ", 1)[0] not in ("molecule", "lab", "unit") or " " not in check:
                out.append(f"{m.id}: check {check!r} is not 'molecule <scenario>', 'lab <node>' or 'unit <node>'")
    return out


def command(check: str) -> list[str]:
    """The command line of one check, run in the copy."""
    kind, what = check.split(" ", 1)
    if kind == "molecule":
        return ["tools/lab/session.sh", "bash", "-c",
                f"cd extensions && molecule --base-config molecule/config.yml reset -s {what} >/dev/null 2>&1; "
                f"molecule --base-config molecule/config.yml test -s {what} --destroy never"]
    pytest = [".venv/bin/python", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", what]
    return ["tools/lab/session.sh", *pytest] if kind == "lab" else pytest


def copy_tree() -> None:
    """build/mutate/roles-tree: HEAD's files, with the toolchain and the fixture build shared."""
    if TREE.exists():
        subprocess.run([".venv/bin/python", "tools/lab/lab.py", "down"], cwd=TREE, check=False,
                       capture_output=True)
        shutil.rmtree(TREE)
    TREE.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(TREE)], input=archive, check=True)
    link = TREE / ".collections" / "ansible_collections" / "dflash" / "deploy"
    link.parent.mkdir(parents=True)
    link.symlink_to("../../..")
    for shared in (".venv", ".tools"):
        (TREE / shared).symlink_to(REPO / shared)
    (TREE / "build").mkdir()
    (TREE / "build" / "fixtures").symlink_to(REPO / "build" / "fixtures")


def run_check(check: str, log: Path) -> bool:
    """True when the check passes."""
    env = dict(os.environ, PATH=f"{TREE / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
               DFLASH_FIXTURE_OUT=str(REPO / "build" / "fixtures"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("DFLASH_LAB_SESSION", None)
    with open(log, "a") as handle:
        handle.write(f"\n=== {check}\n")
        handle.flush()
        try:
            rc = subprocess.run(command(check), cwd=TREE, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                timeout=TIMEOUT, check=False).returncode
        except subprocess.TimeoutExpired:
            handle.write(f"=== timed out after {TIMEOUT} s\n")
            rc = -1
    return rc == 0


def apply(m: Mutant) -> dict[str, str]:
    """Apply the mutant's edits in the copy; returns the original text of each file it changed."""
    originals: dict[str, str] = {}
    for e in m.edits:
        path = TREE / e.file
        text = path.read_text()
        originals.setdefault(e.file, text)
        path.write_text(text.replace(e.find, e.replace, 1))
    return originals


def restore(originals: dict[str, str]) -> None:
    for rel, text in originals.items():
        (TREE / rel).write_text(text)


def score(results: dict, mutants: list[Mutant]) -> str:
    done = [m for m in mutants if m.id in results]
    killed = [m for m in done if results[m.id]["outcome"] == "killed"]
    lines = [f"{len(killed)}/{len(done)} killed ({100.0 * len(killed) / max(len(done), 1):.0f}%)"
             + (f", {len(mutants) - len(done)} not run" if len(done) < len(mutants) else "")]
    for m in done:
        r = results[m.id]
        lines.append(f"  {r['outcome']:8} {m.id}: {r.get('by') or 'no check failed'} ({r['seconds']} s)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    mutants = load()
    if "--list" in argv:
        for m in mutants:
            print(f"{m.id}: {m.why} [{'; '.join(m.checks)}]")
        return 0
    chosen = [m for m in mutants if not os.environ.get("MUTATE_ROLES")
              or m.id in os.environ["MUTATE_ROLES"].split(",")]
    OUT.mkdir(parents=True, exist_ok=True)
    results = {} if os.environ.get("MUTATE_ROLES_FRESH") == "1" or not RESULTS.exists() \
        else json.loads(RESULTS.read_text())
    todo = [m for m in chosen if m.id not in results]
    if not todo:
        print(score(results, chosen))
        return 0
    copy_tree()
    bad = problems(todo, TREE)  # against HEAD as copied: the working tree may differ
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 2
    log = OUT / "roles.log"
    if os.environ.get("MUTATE_ROLES_BASELINE", "1") != "0":
        for check in dict.fromkeys(c for m in todo for c in m.checks):
            print(f"baseline: {check}", flush=True)
            if not run_check(check, log):
                print(f"baseline: {check} fails on the unmutated copy (see {log}); no mutant can be judged by it",
                      file=sys.stderr)
                return 1
    for m in todo:
        print(f"mutant {m.id}: {m.why}", flush=True)
        originals = apply(m)
        start = time.monotonic()
        by = None
        try:
            for check in m.checks:
                if not run_check(check, log):
                    by = check
                    break
        finally:
            restore(originals)
        results[m.id] = {"outcome": "killed" if by else "survived", "by": by,
                         "seconds": round(time.monotonic() - start)}
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True))
        print(f"  {results[m.id]['outcome']}{' by ' + by if by else ''}", flush=True)
    subprocess.run([".venv/bin/python", "tools/lab/lab.py", "down"], cwd=TREE, check=False, capture_output=True)
    summary = score(results, chosen)
    (OUT / "roles-summary.txt").write_text(summary + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
