"""`make mutate` on a bigger machine (transplant/run.py, transplant/plan.py on 2026-11-30; docs/testing.md).

Device side: run exported mutants of one or more files in parallel worker copies of the checkout.

    [NOBASE=1] python3 tests/unit/mutation/device_run.py OUT BUDGET_S WORKERS name[:start:end] ...

Each name: build/devrun/mutants/<name>/{index.json,<job>.py} (device_export.py), the module path and
test command in build/devrun/tomls/<name>.dev.toml (the driver's config); pure-Python packages
(pytest, ansible-core) in build/devrun/site; uv from PATH. A baseline per file first (a file whose
unmutated tests fail is dropped). Results (job -> [rc, seconds, output tail]) to OUT/<name>.json,
written as they come; no new mutant is started after BUDGET_S. device_import_results.py puts them into
the cosmic-ray database, so the driver's summary and --recheck work as after a local run.
"""
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

REPO = Path.cwd()
out, budget, workers = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
names = sys.argv[4:]
t0 = time.monotonic()
site = REPO / "build" / "devrun" / "site"
env = dict(os.environ, PYTHONPATH=str(site), DFLASH_FIXTURE_OUT=str(REPO / "build" / "fixtures"),
           DFLASH_UV=shutil.which("uv") or "uv", PYTHONDONTWRITEBYTECODE="1")

def copy_tree(dst):
    ignore = shutil.ignore_patterns(".git", "__pycache__", "devrun", ".venv", ".tools")
    shutil.copytree(REPO, dst, symlinks=True, ignore=ignore)
    link = dst / ".collections" / "ansible_collections" / "dflash" / "deploy"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to("../../..")

jobs = queue.Queue()
plans = {}
for spec in names:
    name, *rng = spec.split(":")
    conf = tomllib.loads((REPO / "build" / "devrun" / "tomls" / f"{name}.dev.toml").read_text())["cosmic-ray"]
    cmd = conf["test-command"].split()
    cmd[0] = sys.executable
    plans[name] = (conf["module-path"], cmd)
    index = json.loads((REPO / "build" / "devrun" / "mutants" / name / "index.json").read_text())
    ids = sorted(index)
    if rng:
        ids = ids[int(rng[0]):int(rng[1])]
    donef = REPO / "build" / "devrun" / f"done_{name}.json"
    done = set(json.loads(donef.read_text())) if donef.exists() else set()
    for j in ids:
        if j not in done:
            jobs.put((name, j))
results = {n: {} for n in plans}
lock = threading.Lock()

def save():
    for n, r in results.items():
        (out / f"{n}.json").write_text(json.dumps(r))

trees = []
for i in range(workers):
    d = Path("/tmp/mw%d" % i)
    if d.exists():
        shutil.rmtree(d)
    copy_tree(d)
    trees.append(d)
# baseline: every file's tests pass unmutated
base = {}
def _base(n, tree):
    path, cmd = plans[n]
    s = time.monotonic()
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    base[n] = [p.returncode, round(time.monotonic() - s, 1), p.stdout[-3000:] + p.stderr[-2000:]]
    print("baseline", n, base[n][:2], flush=True)
if not os.environ.get("NOBASE"):
    bt = [threading.Thread(target=_base, args=(n, trees[i])) for i, n in enumerate(plans)]
    for t in bt:
        t.start()
    for t in bt:
        t.join()
(out / "baseline.json").write_text(json.dumps(base))
bad = {n for n, v in base.items() if v[0] != 0}
if bad:
    print("BASELINE FAILED", bad, json.dumps({n: base[n][2][-1500:] for n in bad}, indent=1))
    keep = []
    while not jobs.empty():
        item = jobs.get()
        if item[0] not in bad:
            keep.append(item)
    for item in keep:
        jobs.put(item)

def work(tree):
    while time.monotonic() - t0 < budget:
        try:
            n, j = jobs.get_nowait()
        except queue.Empty:
            return
        path, cmd = plans[n]
        target = tree / path
        orig = target.read_bytes()
        shutil.copyfile(REPO / "build" / "devrun" / "mutants" / n / (j + ".py"), target)
        s = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
            rc, tail = p.returncode, (p.stdout + p.stderr)[-1500:]
        except subprocess.TimeoutExpired:
            rc, tail = -1, "timeout"
        finally:
            target.write_bytes(orig)
        with lock:
            results[n][j] = [rc, round(time.monotonic() - s, 1), tail]
            save()

threads = [threading.Thread(target=work, args=(t,)) for t in trees]
for t in threads:
    t.start()
for t in threads:
    t.join()
save()
print({n: (len(r), sum(1 for v in r.values() if v[0] == 0)) for n, r in results.items()}, "left", jobs.qsize(),
      "in", round(time.monotonic() - t0), "s")
