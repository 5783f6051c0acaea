"""`make mutate` on a bigger machine (docs/testing.md, "The 16- and 32-core machines").

Write device results into the file's cosmic-ray db (build/mutate/<name>.sqlite) as the local distributor
would; then `mutate.py --summarize FILE` lists the survivors and `--recheck FILE` works as after a local run.

    .venv/bin/python tests/unit/mutation/device_import_results.py NAME MUTANTS_DIR RESULTS.json ...

RESULTS.json: device_run.py's {name: {job: [rc, seconds, output tail]}}; MUTANTS_DIR: device_export.py's.
"""
import difflib
import json
import sys
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

name, mutants, *results = sys.argv[1:]
db_path = Path(__file__).resolve().parents[3] / "build" / "mutate" / f"{name}.sqlite"
res = {}
for f in results:
    res.update(json.loads(Path(f).read_text()).get(name, {}))
mutants = Path(mutants)
orig = (mutants / "original.py").read_text().splitlines(keepends=True)
with use_db(str(db_path), WorkDB.Mode.open) as db:
    module = next(iter(db.work_items)).mutations[0].module_path
    for job, (rc, _secs, tail) in res.items():
        mut = (mutants / (job + ".py")).read_text().splitlines(keepends=True)
        diff = "".join(difflib.unified_diff(orig, mut, "a/" + str(module), "b/" + str(module), n=1))
        db.set_result(job, WorkResult(worker_outcome=WorkerOutcome.NORMAL, output=tail, diff=diff,
                                      test_outcome=TestOutcome.SURVIVED if rc == 0 else TestOutcome.KILLED))
print(name, len(res), "results")
