"""`make mutate`: cosmic-ray over the modules' decision code, each file against the tests that cover it.

Not a test module (pytest collects test_*.py only). cosmic-ray mutates files on disk, so the run
happens in a copy of the checkout (build/mutate/tree: the tracked files, .collections' relative link
to the copy itself), never in the working tree that the lab and other runs use. The fixture build is
shared (DFLASH_FIXTURE_OUT). The files, their tests and the operators left out are in pyproject.toml
under [tool.dflash-mutate]. Per file it writes build/mutate/<name>.sqlite and <name>.txt (every
surviving mutant as a diff); the summary (killed/total per file) goes to build/mutate/summary.txt.

    .venv/bin/python tests/unit/mutation/mutate.py [FILE ...]   # default: every file in the table
    .venv/bin/python tests/unit/mutation/mutate.py --recheck FILE ...
    MUTATE_COMMIT=HEAD .venv/bin/python tests/unit/mutation/mutate.py --init-only FILE ...  # for device_*.py
    .venv/bin/python tests/unit/mutation/mutate.py --summarize FILE ...  # after device_import_results.py
    .venv/bin/python tests/unit/mutation/mutate.py --check  # the table still applies: every file and test exists

MUTATE_COMMIT=<rev>: the copy is that commit (git archive), not the working tree.

--recheck takes the survivors of an earlier run (build/mutate/<name>.sqlite) and runs each of them again
against the current tests (cosmic-ray apply, the file's test command, the file restored): after tests were
added, only the survivors need another look, since the tests of a file are only ever added to.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "build" / "mutate"
TREE = OUT / os.environ.get("MUTATE_TREE", "tree")  # one per concurrent run
BIN = Path(sys.executable).parent


def _copy_tree() -> None:
    if TREE.exists():
        shutil.rmtree(TREE)
    commit = os.environ.get("MUTATE_COMMIT")
    if commit:  # the code as committed (others' uncommitted edits in the working tree left out)
        TREE.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", commit], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(TREE)], input=archive, check=True)
        _links()
        return
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file() and not src.is_symlink():
            (TREE / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, TREE / rel)
    _links()


def _links() -> None:
    link = TREE / ".collections" / "ansible_collections" / "dflash" / "deploy"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to("../../..")
    for shared in (".venv", ".tools"):  # the toolchain is read, never changed, by the tests
        (TREE / shared).symlink_to(REPO / shared)


def _name(path: str) -> str:
    """build/mutate/<name>.*: unique per file (modules/abi_check.py and module_utils/abi_check.py share a stem)."""
    return Path(path).with_suffix("").as_posix().removeprefix("plugins/").replace("/", ".")


def _config(path: str, tests: list[str], conf: dict) -> str:
    cmd = f"{BIN / 'python'} -m pytest -x -q -p no:cacheprovider -p no:randomly " + " ".join(tests)
    return "\n".join([
        "[cosmic-ray]",
        f"module-path = {json.dumps(path)}",
        f"timeout = {conf.get('timeout', 300)}",
        "excluded-modules = []",
        f"test-command = {json.dumps(cmd)}",
        "[cosmic-ray.distributor]",
        'name = "local"',
        "[cosmic-ray.filters.operators-filter]",
        f"exclude-operators = {json.dumps(conf['exclude-operators'])}",
        "",
    ])


def _counts(db: Path) -> tuple[int, int, list[str]]:
    dump = subprocess.run([str(BIN / "cosmic-ray"), "dump", str(db)], check=True, capture_output=True, text=True)
    total = killed = 0
    survivors = []
    for line in dump.stdout.splitlines():
        item, result = json.loads(line)
        # filtered (skipped) and not yet run are not counted; incompetent (the mutant cannot be imported) neither
        if result is None or result.get("worker_outcome") == "skipped" or result.get("test_outcome") == "incompetent":
            continue
        total += 1
        if result["test_outcome"] == "survived":
            m = item["mutations"][0]
            survivors.append("%s:%s %s #%s\n%s" % (m["module_path"], m["start_pos"][0], m["operator_name"],
                                                   m["occurrence"], result.get("diff") or ""))
        else:
            killed += 1
    return killed, total, survivors


def _report(path: str) -> str:
    name = _name(path)
    killed, total, survivors = _counts(OUT / f"{name}.sqlite")
    (OUT / f"{name}.txt").write_text("\n".join(survivors))
    line = f"{path}: {killed}/{total} killed ({100.0 * killed / max(total, 1):.1f}%), {len(survivors)} survived"
    print(line, flush=True)
    return line


def _recheck(paths: list[str], conf: dict, env: dict) -> list[str]:
    lines = []
    for path in paths:
        name = _name(path)
        db = OUT / f"{name}.sqlite"
        killed, total, survivors = _counts(db)
        cmd = json.loads(_config(path, conf["files"][path], conf).split("test-command = ", 1)[1].split("\n", 1)[0])
        original = (TREE / path).read_bytes()
        still = []
        for survivor in survivors:
            head = survivor.split("\n", 1)[0]  # "<path>:<line> <operator> #<occurrence>"
            where, operator, occurrence = head.split(" ")
            subprocess.run([str(BIN / "cosmic-ray"), "apply", path, operator, occurrence[1:]], cwd=TREE, env=env,
                           check=True, capture_output=True)
            try:
                rc = subprocess.run(cmd.split(), cwd=TREE, env=env, check=False, capture_output=True,
                                    timeout=conf.get("timeout", 300)).returncode
            except subprocess.TimeoutExpired:
                rc = -1
            finally:
                (TREE / path).write_bytes(original)
            if rc == 0:
                still.append(survivor)
            else:
                killed += 1
        (OUT / f"{name}.recheck.txt").write_text("\n".join(still))
        line = "%s: %d/%d killed (%.1f%%), %d survived (survivors of the run rechecked against the current tests)" % (
            path, killed, total, 100.0 * killed / max(total, 1), len(still))
        print(line, flush=True)
        lines.append(line)
    return lines


def load(pyproject: Path = REPO / "pyproject.toml") -> dict:
    return tomllib.loads(pyproject.read_text())["tool"]["dflash-mutate"]


def problems(conf: dict, root: Path = REPO) -> list[str]:
    """Why the table would not apply to the checkout: a file to mutate, or a test file its command names (also
    in a --deselect), that is not there; a renamed or moved file would otherwise drop out of the score."""
    out = []
    for path, tests in conf["files"].items():
        if not (root / path).is_file():
            out.append(f"{path}: no such file")
        for test in tests:
            node = test.split("=", 1)[1] if test.startswith("--") else test
            if not (root / node.split("::", 1)[0]).is_file():
                out.append(f"{path}: test {node}: no such file")
    return out


def main(argv: list[str]) -> int:
    conf = load()
    files = conf["files"]
    if argv[:1] == ["--check"]:
        found = problems(conf)
        print("\n".join(found) or "%d files, every file and test there" % len(files))
        return 1 if found else 0
    mode = argv[0] if argv and argv[0] in ("--recheck", "--init-only", "--summarize") else ""
    recheck = mode == "--recheck"
    chosen = (argv[1:] if mode else argv) or list(files)
    OUT.mkdir(parents=True, exist_ok=True)
    if mode == "--summarize":  # after device_import_results.py: the survivors and the score from the database
        with open(OUT / "summary.txt", "a") as handle:
            handle.write("\n".join(_report(path) for path in chosen) + "\n")
        return 0
    _copy_tree()
    env = dict(os.environ, DFLASH_FIXTURE_OUT=str(REPO / "build" / "fixtures"), PYTHONDONTWRITEBYTECODE="1",
               DFLASH_UV=str(REPO / ".tools" / "uv" / "bin" / "uv"))
    summary = []
    if recheck:
        summary = _recheck(chosen, conf, env)
        chosen = []
    for path in chosen:
        name = _name(path)
        (OUT / f"{name}.toml").write_text(_config(path, files[path], conf))
        db = OUT / f"{name}.sqlite"
        db.unlink(missing_ok=True)
        run = dict(cwd=TREE, env=env)
        if mode != "--init-only":  # --init-only: device_run.py makes the baseline there
            # the unmutated code must pass its tests in the copy, or every mutant would count as killed
            subprocess.run([str(BIN / "cosmic-ray"), "baseline", str(OUT / f"{name}.toml")], check=True, **run)
        subprocess.run([str(BIN / "cosmic-ray"), "init", str(OUT / f"{name}.toml"), str(db)], check=True, **run)
        subprocess.run([str(BIN / "cr-filter-operators"), str(db), str(OUT / f"{name}.toml")], check=True, **run)
        subprocess.run([str(BIN / "cr-filter-pragma"), str(db)], check=True, **run)
        if mode == "--init-only":
            continue
        subprocess.run([str(BIN / "cosmic-ray"), "exec", str(OUT / f"{name}.toml"), str(db)], check=True, **run)
        summary.append(_report(path))
    with open(OUT / "summary.txt", "a") as handle:
        handle.write("\n".join(summary) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
