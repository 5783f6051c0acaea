"""Deploy benchmark in the lab: a first deploy, a re-run with nothing to do (the fast path, and the full path as
its baseline, alternating), a re-run after one DFlash file was edited by hand, each with its per-role (phase)
times, and the controller's CPU seconds per host for 1 target and for N targets at once.

Not a test: `make bench-deploy` runs it with the lab up (tools/lab/session.sh; LAB_TARGETS=N for the fleet
figures). Each playbook runs as an operator runs it (the checkout's ansible.cfg, a clean environment); its wall
time is measured here and its controller CPU is the rusage of the ansible-playbook process tree (user + system:
ansible-playbook, its forks and ssh). Per-phase times are the deploy_summary callback's "time:" line. The fleet
figures alternate 1-target and N-target re-runs and report medians, so the machine's drift hits both alike.

    .venv/bin/python bench/bench_deploy.py --repeat 3 --fleet 8 --json build/bench-deploy.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
EDITED = "lib/python3.11/site-packages/sglang/srt/speculative/dflash_worker.py"


def run_playbook(playbook: str, limit: str, *extra: str) -> dict:
    """Wall seconds, controller CPU seconds (children's rusage), rc and the summary's phase times."""
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": f"{REPO}/.venv/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    before = os.times()
    start = time.monotonic()
    proc = subprocess.run([str(PLAYBOOK), playbook, "-l", limit, *extra], cwd=REPO, env=env, capture_output=True,
                          text=True, check=False)
    wall = time.monotonic() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    phases = {}
    for line in proc.stdout.splitlines():
        if line.strip().startswith("time:"):
            for name, secs in re.findall(r"([a-z_]+) (\d+)s", line):
                phases[name] = phases.get(name, 0) + int(secs)
    changed = re.findall(r"changed=(\d+)", proc.stdout)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise SystemExit(f"bench: {playbook} -l {limit} {' '.join(extra)} failed (rc {proc.returncode}):\n{tail}")
    return {"wall": round(wall, 2), "cpu": round(cpu, 2), "phases": phases,
            "changed": sum(int(c) for c in changed), "fast_path": "  fast path: " in proc.stdout}


def lab(*args: str) -> None:
    subprocess.run([sys.executable, str(REPO / "tools" / "lab" / "lab.py"), *args], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)


def podman_exec(host: str, script: str) -> None:
    subprocess.run(["podman", "exec", f"dflash-lab-{host}", "bash", "-c", script], check=True)


def median(values):
    return round(statistics.median(values), 2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="ct200")
    ap.add_argument("--repeat", type=int, default=3, help="no-change re-runs (median); fleet rounds")
    ap.add_argument("--fleet", type=int, default=0, help="N fleet targets ct201… (up with LAB_TARGETS=N); 0: skip")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out = {"host": args.host}

    if not (REPO / "build" / "artifacts" / "cuda-cu130.tar").is_file():
        print("bench: staging the artifacts from the reference host (not timed)", flush=True)
        run_playbook("playbooks/stage_artifacts.yml", "ct129")

    print(f"bench: {args.host} recreated bare, then deployed", flush=True)
    lab("reset", args.host)
    out["first"] = run_playbook("playbooks/deploy_dflash.yml", args.host)
    # The fast path (roles/deploy_state) against its baseline, the full path of the same re-run
    # (deploy_state_enabled=false), alternating so the machine's drift hits both alike.
    runs, full = [], []
    for _ in range(args.repeat):
        runs.append(run_playbook("playbooks/deploy_dflash.yml", args.host))
        full.append(run_playbook("playbooks/deploy_dflash.yml", args.host, "-e", "deploy_state_enabled=false"))
    if any(r["changed"] for r in runs + full):
        raise SystemExit(f"bench: a re-run with nothing to do changed something: {runs + full}")
    if not all(r["fast_path"] for r in runs) or any(r["fast_path"] for r in full):
        raise SystemExit(f"bench: the fast path was not taken where expected: {runs + full}")
    out["no_change"] = {"runs": runs, "wall": median([r["wall"] for r in runs]),
                        "cpu": median([r["cpu"] for r in runs])}
    out["no_change_full"] = {"runs": full, "wall": median([r["wall"] for r in full]),
                             "cpu": median([r["cpu"] for r in full])}

    print(f"bench: one DFlash file edited by hand in {args.host}'s running release", flush=True)
    podman_exec(args.host, f"echo '# edited by hand' >> /opt/dflash/instances/qwen3-8b/current/{EDITED}")
    out["after_edit"] = run_playbook("playbooks/deploy_dflash.yml", args.host)

    if args.fleet:
        fleet = ",".join(f"ct{201 + i}" for i in range(args.fleet))
        serial = ["-e", f"deploy_dflash_serial={args.fleet}", "-f", str(args.fleet)]
        print(f"bench: {fleet} deployed at once, then re-runs alternating 1 and {args.fleet} targets", flush=True)
        out["fleet_first"] = run_playbook("playbooks/deploy_dflash.yml", fleet, *serial)
        one, many = [], []
        for _ in range(args.repeat):
            one.append(run_playbook("playbooks/deploy_dflash.yml", "ct201"))
            many.append(run_playbook("playbooks/deploy_dflash.yml", fleet, *serial))
        out["fleet"] = {"targets": args.fleet,
                        "cpu_per_host_1": median([r["cpu"] for r in one]),
                        "cpu_per_host_n": median([r["cpu"] / args.fleet for r in many]),
                        "wall_1": median([r["wall"] for r in one]), "wall_n": median([r["wall"] for r in many])}
        out["fleet"]["ratio"] = round(out["fleet"]["cpu_per_host_n"] / out["fleet"]["cpu_per_host_1"], 2)

    def phases(r):
        return ", ".join(f"{k} {v}s" for k, v in sorted(r["phases"].items(), key=lambda kv: -kv[1]))

    print()
    print("| run | wall s | controller CPU s | changed | phases |")
    print("|---|---|---|---|---|")
    print(f"| first deploy (bare host) | {out['first']['wall']} | {out['first']['cpu']} | {out['first']['changed']} "
          f"| {phases(out['first'])} |")
    nc = out["no_change"]
    print(f"| no-change re-run (median of {len(nc['runs'])}) | {nc['wall']} | {nc['cpu']} | 0 "
          f"| {phases(nc['runs'][len(nc['runs']) // 2])} |")
    nf = out["no_change_full"]
    print(f"| no-change re-run, full path (deploy_state_enabled=false; median of {len(nf['runs'])}) | {nf['wall']} "
          f"| {nf['cpu']} | 0 | {phases(nf['runs'][len(nf['runs']) // 2])} |")
    ae = out["after_edit"]
    print(f"| re-run after one DFlash file edited | {ae['wall']} | {ae['cpu']} | {ae['changed']} | {phases(ae)} |")
    print(f"\nfast path / full path, no-change re-run: wall {round(nc['wall'] / nf['wall'], 2)}, "
          f"controller CPU {round(nc['cpu'] / nf['cpu'], 2)}")
    if args.fleet:
        f = out["fleet"]
        print(f"\ncontroller CPU per host, no-change re-run: 1 target {f['cpu_per_host_1']} s, {f['targets']} "
              f"targets {f['cpu_per_host_n']} s (ratio {f['ratio']}; wall {f['wall_1']} s vs {f['wall_n']} s)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
