#!/usr/bin/env python3
"""Run one Ansible module file in this process under a profiler, all threads included.

    python3 tests/gpu/profile_module.py {sample|cprofile} OUT.json MODULE.py ARGS.json

The module runs as Ansible's wrapper would run it (``__main__``, the args
file as ``argv[1]``); its JSON result goes to stdout as usual. Two profilers,
one per run (together they would distort each other):

* ``sample``: a wall-clock sampler thread reads every thread's Python stack
  (``sys._current_frames``) every 2 ms, so time spent waiting (locks, a
  thread pool, a system call such as copy_file_range or link) is counted
  where it is spent, in every thread. OUT.json holds, per thread group, the
  top functions by samples as the innermost frame (self) and anywhere on
  the stack (inclusive), and the top innermost call sites (file:line).
* ``cprofile``: deterministic cProfile of the main thread and of every thread
  the module starts (before Python 3.12 threading.Thread.run is wrapped and
  the per-thread profiles merged; from 3.12 cProfile is built on
  sys.monitoring and one profiler sees every thread); OUT.json holds
  the top functions by own time and by cumulative time, with call counts.
  cProfile's per-call overhead inflates functions called very often: use it
  for call counts, the sampler for where wall time goes.
"""
from __future__ import annotations

import collections
import cProfile
import json
import os
import pstats
import runpy
import sys
import threading
import time

TOP = 30


def _fmt(code) -> str:
    path = code.co_filename
    parts = path.split(os.sep)
    if "ansible_collections" in parts:
        path = "/".join(parts[parts.index("ansible_collections") + 3:])
    else:
        path = "/".join(parts[-2:])
    return "%s:%s" % (path, code.co_name)


def _group(name: str) -> str:
    if name == "MainThread":
        return "main"
    if name.startswith("ThreadPoolExecutor"):
        return "pool"
    return name.rstrip("0123456789-_") or name


class Sampler(threading.Thread):
    def __init__(self, interval: float = 0.002):
        super().__init__(name="profiler-sampler", daemon=True)
        self.interval = interval
        self.stop = threading.Event()
        self.samples = collections.Counter()
        self.self_counts = collections.defaultdict(collections.Counter)
        self.incl_counts = collections.defaultdict(collections.Counter)
        self.line_counts = collections.defaultdict(collections.Counter)
        self.ticks = 0

    def run(self):
        me = threading.get_ident()
        while not self.stop.is_set():
            self.ticks += 1
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                group = _group(names.get(ident, "?"))
                self.samples[group] += 1
                leaf = frame
                self.self_counts[group][_fmt(leaf.f_code)] += 1
                self.line_counts[group]["%s@%d" % (_fmt(leaf.f_code), leaf.f_lineno)] += 1
                seen = set()
                while frame is not None:
                    key = _fmt(frame.f_code)
                    if key not in seen:
                        seen.add(key)
                        self.incl_counts[group][key] += 1
                    frame = frame.f_back
            time.sleep(self.interval)

    def report(self, wall: float) -> dict:
        out = {"interval_s": self.interval, "ticks": self.ticks, "wall_s": round(wall, 3), "threads": {}}
        for group, n in self.samples.most_common():
            out["threads"][group] = {
                "samples": n,
                "self": [[k, v, round(v / n, 3)] for k, v in self.self_counts[group].most_common(TOP)],
                "inclusive": [[k, v, round(v / n, 3)] for k, v in self.incl_counts[group].most_common(TOP)],
                "lines": [[k, v] for k, v in self.line_counts[group].most_common(TOP)],
            }
        return out


def _stats_rows(stats: pstats.Stats, key: str) -> list:
    rows = []
    for (path, line, func), (_cc, nc, tt, ct, _callers) in sorted(
            stats.stats.items(), key=lambda kv: kv[1][2 if key == "tottime" else 3], reverse=True)[:TOP]:
        parts = path.split(os.sep)
        if "ansible_collections" in parts:
            path = "/".join(parts[parts.index("ansible_collections") + 3:])
        else:
            path = "/".join(parts[-2:])
        rows.append({"func": "%s:%d:%s" % (path, line, func), "calls": nc, "tottime": round(tt, 4),
                     "cumtime": round(ct, 4)})
    return rows


def main() -> int:
    mode, out_path, module_path, args_path = sys.argv[1:5]
    sys.argv = [module_path, args_path]
    profiles = []
    sampler = None
    if mode == "cprofile" and sys.version_info >= (3, 12):
        # cProfile sits on sys.monitoring from 3.12: one profiler for the whole interpreter, all
        # threads included (a second Profile.enable() raises "Another profiling tool is already
        # active", which would kill every worker thread it was tried in)
        main_prof = cProfile.Profile()
        profiles.append(main_prof)
    elif mode == "cprofile":
        orig_run = threading.Thread.run

        def run(self):
            prof = cProfile.Profile()
            profiles.append(prof)
            prof.enable()
            try:
                orig_run(self)
            finally:
                prof.disable()

        threading.Thread.run = run
        main_prof = cProfile.Profile()
        profiles.append(main_prof)
    elif mode == "sample":
        sampler = Sampler()
        sampler.start()
    else:
        raise SystemExit("mode must be sample or cprofile")
    start = time.monotonic()
    code = 0
    try:
        if mode == "cprofile":
            main_prof.enable()
        runpy.run_path(module_path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        wall = time.monotonic() - start
        if mode == "cprofile":
            main_prof.disable()
            stats = pstats.Stats(profiles[0])
            for prof in profiles[1:]:
                stats.add(prof)
            report = {"mode": mode, "wall_s": round(wall, 3), "threads_profiled": len(profiles),
                      "by_tottime": _stats_rows(stats, "tottime"), "by_cumtime": _stats_rows(stats, "cumtime")}
        else:
            sampler.stop.set()
            sampler.join()
            report = dict(mode=mode, **sampler.report(wall))
        with open(out_path, "w") as fh:
            json.dump(report, fh, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
