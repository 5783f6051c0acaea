"""`make mutate`: the survivors of a file run again against some tests only (docs/testing.md, "Mutation testing").

    .venv/bin/python tests/unit/mutation/recheck.py --source REV [--tests-from REV] [--workers N] NAME TEST ...

NAME: build/mutate/<NAME>.sqlite. Each survivor is rebuilt from the file as committed in --source (the commit
its mutants were made from) and run with `pytest -x` on TEST ... (node ids or files) in copies of --tests-from
(default HEAD: the newest tests) holding that file. First the unmutated file must pass those tests there, or
nothing is rechecked. A survivor that fails them is marked killed in the database (its output says so), so
`mutate.py --summarize NAME's file` counts it. Used for the tests a device run had to leave out (they fail
there for a reason of that machine) and for tests written after the run: the file's tests are only ever added
to, so a mutant they kill would be killed by its full test command too.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from cosmic_ray.mutating import mutate_code
from cosmic_ray.plugins import get_operator
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "build" / "mutate"
BIN = Path(sys.executable).parent


def tree(dst: Path, rev: str, path: str, source: str) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dst)], input=archive, check=True)
    (dst / path).write_text(source)
    link = dst / ".collections" / "ansible_collections" / "dflash" / "deploy"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to("../../..")
    for shared in (".venv", ".tools"):
        (dst / shared).symlink_to(REPO / shared)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--tests-from", default="HEAD")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("name")
    ap.add_argument("tests", nargs="+")
    args = ap.parse_args()
    db = OUT / f"{args.name}.sqlite"
    dump = subprocess.run([str(BIN / "cosmic-ray"), "dump", str(db)], check=True, capture_output=True, text=True)
    survivors = []
    for line in dump.stdout.splitlines():
        item, result = json.loads(line)
        if result and result.get("test_outcome") == "survived":
            survivors.append((item, result))
    path = survivors[0][0]["mutations"][0]["module_path"] if survivors else None
    if not path:
        print(args.name, "no survivors")
        return 0
    source = subprocess.run(["git", "show", f"{args.source}:{path}"], cwd=REPO, check=True, capture_output=True,
                            text=True).stdout
    env = dict(os.environ, DFLASH_FIXTURE_OUT=str(REPO / "build" / "fixtures"), PYTHONDONTWRITEBYTECODE="1",
               DFLASH_UV=str(REPO / ".tools" / "uv" / "bin" / "uv"))
    cmd = [str(BIN / "python"), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *args.tests]
    trees = [OUT / f"recheck-{args.name}-{i}" for i in range(args.workers)]
    for t in trees:
        tree(t, args.tests_from, path, source)
    base = subprocess.run(cmd, cwd=trees[0], env=env, capture_output=True, text=True, check=False)
    if base.returncode != 0:
        print(args.name, "baseline failed, nothing rechecked:\n", (base.stdout + base.stderr)[-3000:])
        return 1
    jobs: queue.Queue = queue.Queue()
    for s in survivors:
        jobs.put(s)
    killed = []
    lock = threading.Lock()

    def work(t: Path) -> None:
        while True:
            try:
                item, result = jobs.get_nowait()
            except queue.Empty:
                return
            m = item["mutations"][0]
            op = get_operator(m["operator_name"])(**(m.get("operator_args") or {}))
            (t / path).write_text(mutate_code(source, op, m["occurrence"]))
            try:
                p = subprocess.run(cmd, cwd=t, env=env, capture_output=True, text=True, timeout=300, check=False)
                rc, tail = p.returncode, (p.stdout + p.stderr)[-1500:]
            except subprocess.TimeoutExpired:
                rc, tail = -1, "timeout"
            finally:
                (t / path).write_text(source)
            if rc != 0:
                with lock:
                    killed.append((item["job_id"], result.get("diff") or "", tail))

    threads = [threading.Thread(target=work, args=(t,)) for t in trees]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    with use_db(str(db), WorkDB.Mode.open) as wdb:
        for job, diff, tail in killed:
            wdb.set_result(job, WorkResult(worker_outcome=WorkerOutcome.NORMAL, diff=diff,
                                           output="recheck against %s:\n%s" % (" ".join(args.tests), tail),
                                           test_outcome=TestOutcome.KILLED))
    for t in trees:
        shutil.rmtree(t)
    print(args.name, "rechecked", len(survivors), "survivors: killed", len(killed),
          "left", len(survivors) - len(killed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
