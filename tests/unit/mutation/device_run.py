"""`make mutate` on a bigger machine (docs/testing.md, "The 16- and 32-core machines").

Device side: run exported mutants of one or more files in parallel worker copies of the code.

    python3 tests/unit/mutation/device_run.py OUT DEADLINE_S WORKERS name ...

Each name: build/devrun/mutants/<name>/{index.json,<job>.py} (device_export.py) and the module path and test
command in build/devrun/tomls/<name>.toml (the driver's config). The worker copies are made from
build/devrun/head.tar (`git archive` of the commit the mutants were exported from), so only committed code is
tested; .collections links to the copy, and the venv in DEVRUN_VENV (the toolchain venv's stand-in, made by
the command) is copied in as .venv. Pure-Python packages (pytest, ansible-core) come from build/devrun/site,
uv from DFLASH_UV.

The fixtures are built once, then a baseline per file (see _base): tests that fail unmutated there are
deselected; a file whose baseline still fails is dropped. Results go to OUT/results.json
({name: {job: [rc, seconds, output tail]}}) as they come, the baselines to OUT/baseline.json. A mutant still
running DEADLINE_S after the start is stopped and not recorded (it stays pending for the next call);
device_import_results.py puts the results into the cosmic-ray database.
"""
import json
import os
import queue
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
from pathlib import Path

REPO = Path.cwd()
DEVRUN = REPO / "build" / "devrun"
out, deadline, workers = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
names = sys.argv[4:]
t0 = time.monotonic()
env = dict(os.environ, PYTHONPATH=str(DEVRUN / "site"), DFLASH_FIXTURE_OUT=str(REPO / "build" / "fixtures"),
           DFLASH_UV=os.environ.get("DFLASH_UV") or shutil.which("uv") or "uv", PYTHONDONTWRITEBYTECODE="1")
venv = os.environ.get("DEVRUN_VENV")


def log(*args):
    print("[%4.0fs]" % (time.monotonic() - t0), *args, flush=True)


def make_tree(dst):
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    with tarfile.open(DEVRUN / "head.tar") as tar:
        tar.extractall(dst, filter="tar")
    link = dst / ".collections" / "ansible_collections" / "dflash" / "deploy"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to("../../..")
    if venv:
        shutil.copytree(venv, dst / ".venv", symlinks=True)


plans = {}
jobs = queue.Queue()
for name in names:
    conf = tomllib.loads((DEVRUN / "tomls" / f"{name}.toml").read_text())["cosmic-ray"]
    cmd = conf["test-command"].split()
    cmd[0] = sys.executable
    plans[name] = [conf["module-path"], cmd]
# in the order the names are given (the dearest first, so that the deadline stops only short runs)
for n in names:
    for j in sorted(json.loads((DEVRUN / "mutants" / n / "index.json").read_text())):
        jobs.put((n, j))
log(jobs.qsize(), "mutants")

trees = [Path("/tmp/mw%d" % i) for i in range(workers)]
threads = [threading.Thread(target=make_tree, args=(t,)) for t in trees]
for t in threads:
    t.start()
for t in threads:
    t.join()
log("trees made")
subprocess.run([sys.executable, "tests/fixtures/build.py", "--out", env["DFLASH_FIXTURE_OUT"]], cwd=trees[0],
               env=env, check=True, capture_output=True)
log("fixtures built")

base = {}


def _base(n, tree):
    """The unmutated code against the file's tests, all of them (no -x). Tests that fail there for a reason of
    that machine (no Python 3.11, a real GPU driver) are deselected and named in baseline.json; the survivors
    are run against them at home afterwards (mutate.py --recheck)."""
    path, cmd = plans[n]
    s = time.monotonic()
    full = [x for x in cmd if x != "-x"] + ["-rfE"]
    p = subprocess.run(full, cwd=tree, env=env, capture_output=True, text=True, timeout=400)
    failed = sorted({line.split(" ")[1] for line in p.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))})
    base[n] = {"rc": p.returncode, "s": round(time.monotonic() - s, 1), "tail": (p.stdout + p.stderr)[-6000:],
               "deselected": failed}
    if p.returncode != 0 and failed:
        cmd2 = cmd + ["--deselect=" + x for x in failed]
        p = subprocess.run(cmd2, cwd=tree, env=env, capture_output=True, text=True, timeout=400)
        base[n].update(rc2=p.returncode, tail2=(p.stdout + p.stderr)[-3000:])
        if p.returncode == 0:
            plans[n][1] = cmd2
    log("baseline", n, base[n]["rc"], base[n]["s"], base[n].get("rc2"), failed)


bt = [threading.Thread(target=_base, args=(n, trees[i % workers])) for i, n in enumerate(plans)]
for t in bt:
    t.start()
for t in bt:
    t.join()
(out / "baseline.json").write_text(json.dumps(base))
bad = {n for n in plans if base[n]["rc"] != 0 and base[n].get("rc2", 1) != 0}
if bad:
    log("BASELINE FAILED", bad)
    keep = []
    while not jobs.empty():
        item = jobs.get()
        if item[0] not in bad:
            keep.append(item)
    for item in keep:
        jobs.put(item)

results = {n: {} for n in plans}
lock = threading.Lock()


def save():
    (out / "results.json").write_text(json.dumps(results))


def work(tree):
    while time.monotonic() - t0 < deadline - 5:
        try:
            n, j = jobs.get_nowait()
        except queue.Empty:
            return
        path, cmd = plans[n]
        target = tree / path
        orig = target.read_bytes()
        shutil.copyfile(DEVRUN / "mutants" / n / (j + ".py"), target)
        s = time.monotonic()
        left = deadline - (s - t0)
        try:
            p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=min(300, left))
            rc, tail = p.returncode, (p.stdout + p.stderr)[-1500:]
        except subprocess.TimeoutExpired:
            rc, tail = (-1, "timeout") if left > 300 else (None, "")
        finally:
            target.write_bytes(orig)
        if rc is None:  # stopped by the deadline: stays pending
            continue
        with lock:
            results[n][j] = [rc, round(time.monotonic() - s, 1), tail]
            save()


threads = [threading.Thread(target=work, args=(t,)) for t in trees]
for t in threads:
    t.start()
for t in threads:
    t.join()
save()
log({n: (len(r), sum(1 for v in r.values() if v[0] == 0)) for n, r in results.items()}, "left", jobs.qsize())
