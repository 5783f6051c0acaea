"""`make mutate` on a bigger machine (docs/testing.md, "The 16- and 32-core machines").

Export every pending mutant of a cosmic-ray db (with --survivors: every survivor, for a recheck there) as a
whole mutated file: OUT/<job>.py, OUT/index.json (job -> [operator, occurrence, line]) and OUT/original.py
(the file mutated).

    .venv/bin/python tests/unit/mutation/device_export.py [--survivors] DB SOURCE OUT
"""
import json
import sys
from pathlib import Path

from cosmic_ray.mutating import mutate_code
from cosmic_ray.plugins import get_operator
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome

survivors = sys.argv[1] == "--survivors"
db_path, src, out = sys.argv[1 + survivors], Path(sys.argv[2 + survivors]), Path(sys.argv[3 + survivors])
out.mkdir(parents=True, exist_ok=True)
code = src.read_text()
(out / "original.py").write_text(code)
index = {}
with use_db(db_path, WorkDB.Mode.open) as db:
    results = dict(db.results)
    for item in db.work_items:
        result = results.get(item.job_id)
        if (result is not None) != survivors or (survivors and result.test_outcome != TestOutcome.SURVIVED):
            continue
        m = item.mutations[0]
        op = get_operator(m.operator_name)(**(m.operator_args or {}))
        try:
            mutated = mutate_code(code, op, m.occurrence)
        except Exception as exc:  # cosmic-ray counts these as incompetent (worker exception)
            print("not exported:", item.job_id, m.operator_name, m.occurrence, exc)
            continue
        if mutated is None:
            continue
        (out / (item.job_id + ".py")).write_text(mutated)
        index[item.job_id] = [m.operator_name, m.occurrence, m.start_pos[0]]
(out / "index.json").write_text(json.dumps(index))
print(len(index), "mutants exported")
