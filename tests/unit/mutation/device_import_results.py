"""`make mutate` on a bigger machine (transplant/run.py, transplant/plan.py on 2026-11-30; docs/testing.md).

Write device results (job -> [rc, s, tail]) into a cosmic-ray db as the local distributor would."""
import difflib
import json
import shutil
import sys
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

src_db, dst_db, results, module, mutants = sys.argv[1:6]
shutil.copyfile(src_db, dst_db)
res = {}
for f in results.split(","):
    res.update(json.loads(Path(f).read_text()))
orig = Path(module).read_text().splitlines(keepends=True)
with use_db(dst_db, WorkDB.Mode.open) as db:
    for job, (rc, _secs, tail) in res.items():
        mut = (Path(mutants) / (job + ".py")).read_text().splitlines(keepends=True)
        diff = "".join(difflib.unified_diff(orig, mut, "a/" + module, "b/" + module, n=1))
        db.set_result(job, WorkResult(worker_outcome=WorkerOutcome.NORMAL, output=tail, diff=diff,
                                      test_outcome=TestOutcome.SURVIVED if rc == 0 else TestOutcome.KILLED))
print(len(res), "results")
