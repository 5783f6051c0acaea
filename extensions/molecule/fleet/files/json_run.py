"""Summarise an ansible-playbook run printed by the ansible.posix.json stdout callback.

    ansible-playbook ... | json_run.py --task 'Install the locked package set (uv pip sync)' ...

Reads the run's stdout on stdin and prints one JSON object:
  stats      the PLAY RECAP per host (a host the play never reached is absent)
  failed     per host, the message of its last failed task
  intervals  per --task (matched by the end of the task's name), per host: the
             command's own start and end on the host ("YYYY-mm-dd HH:MM:SS.ffffff",
             the hosts share the controller's kernel clock) and its duration in s
  overlap    per --task: how many hosts ran it, the most that ran it at the same
             instant (peak), and the window in which all of them ran it at once
             (common_s = earliest end - latest start; > 0 means all overlapped);
             under "all": the same for each host's span from the start of its first
             --task to the end of its last (e.g. the whole venv build)
"""
import argparse
import json
import sys
from datetime import datetime

FMT = "%Y-%m-%d %H:%M:%S.%f"


def load(text):
    """The callback prints one JSON document; warnings may come before it."""
    for i, line in enumerate(text.splitlines(keepends=True)):
        if line.startswith("{"):
            start = sum(len(x) for x in text.splitlines(keepends=True)[:i])
            return json.JSONDecoder().raw_decode(text[start:])[0]
    raise SystemExit("no JSON document in the run's stdout: " + text[:2000])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--task", action="append", default=[])
    args = p.parse_args()
    run = load(sys.stdin.read())
    out = {"stats": run.get("stats", {}), "failed": {}, "intervals": {}, "overlap": {}}
    for play in run.get("plays", []):
        for task in play.get("tasks", []):
            name = task["task"]["name"]
            for host, res in task.get("hosts", {}).items():
                if res.get("failed") and not res.get("skipped"):
                    out["failed"][host] = str(res.get("msg", ""))
                for wanted in args.task:
                    if name.endswith(wanted) and res.get("start") and res.get("end"):
                        t0 = datetime.strptime(res["start"], FMT)
                        t1 = datetime.strptime(res["end"], FMT)
                        out["intervals"].setdefault(wanted, {})[host] = [
                            res["start"], res["end"], round((t1 - t0).total_seconds(), 2)]
    hosts = {}
    for per_host in out["intervals"].values():
        for host, (s, e, seconds) in per_host.items():  # noqa: B007
            hosts.setdefault(host, []).extend([s, e])
    if len(args.task) > 1:
        out["intervals"]["all"] = {h: [min(t), max(t), 0] for h, t in hosts.items()}
    for wanted, per_host in out["intervals"].items():
        spans = [(datetime.strptime(s, FMT), datetime.strptime(e, FMT)) for s, e, seconds in per_host.values()]
        if not spans:
            continue
        for (s, e), row in zip(spans, per_host.values(), strict=True):
            row[2] = round((e - s).total_seconds(), 2)
        edges = sorted([(s, 1) for s, e in spans] + [(e, -1) for s, e in spans])
        peak = running = 0
        for moment, step in edges:  # noqa: B007
            running += step
            peak = max(peak, running)
        common = (min(e for s, e in spans) - max(s for s, e in spans)).total_seconds()
        out["overlap"][wanted] = {"hosts": len(spans), "peak": peak, "common_s": round(common, 2)}
    json.dump(out, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
