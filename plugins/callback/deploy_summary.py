# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_summary
type: aggregate
short_description: Progress of long deploy steps, and one summary per host at the end
description:
  - While a task runs longer than O(interval) seconds, prints a line every O(interval) seconds
    naming the task, the hosts it still runs on and the time so far (a venv build, a transplant
    or a readiness wait is never one silent minute).
  - At the end of the run, prints one block per host - the release, what changed in each phase
    and the time each phase took, the health URL and the served model, and per instance the
    performance gate's verdict and figures; or, for a failed host, the
    task that failed and its first line, with the journal lines the failure carried. For a looped
    task that is the first failing item's own message and label, not "One or more items failed".
  - Phases are the roles (C(sglang_venv), C(cuda_overlay), ...) and the play's own tasks.
    A play reports its outcome by setting the fact C(dflash_deploy_report) (a dict with
    C(release), C(health_url), C(models) and C(changes), and C(perf) - each instance the performance gate
    measured, its verdict and figures), which this callback reads; nothing else is required.
  - A play whose rescue reports a host's failure (C(dflash_deploy_report) with C(status) V(failed), as
    C(deploy_dflash.yml) does before it publishes the report with C(ansible.builtin.set_stats)) and then
    fails the host again keeps the failure first recorded; the second one is not printed.
  - C(changes) are the roles' own words for what they changed, or in check mode would change - the
    packages a new release adds, removes or upgrades, the overlaid files, the env files, drop-ins,
    unit and C(current) links (the C(*_changes) facts the roles set with the C(dflash.deploy.release_changes)
    family of filters). They are printed first, then the names of the tasks that changed, per phase.
  - With O(preload), before the first task it imports the collection's filter and action plugins in the
    controller's own process, so the worker Ansible forks for each task finds them there instead of
    compiling them again (Ansible's collection loader keeps no bytecode), a few seconds of controller CPU
    a deploy. It changes nothing else a run does.
  - Enabled by the collection's C(ansible.cfg) (C(callbacks_enabled)). Beside a machine-readable
    stdout callback (one whose name ends in C(json)) it prints nothing, so that output stays parseable.
version_added: 0.1.0
options:
  interval:
    description: Seconds between progress lines of a running task (0 turns them off).
    type: int
    default: 15
    env:
      - name: DFLASH_PROGRESS_INTERVAL
    ini:
      - section: dflash_deploy_summary
        key: interval
  preload:
    description: Import the collection's filter and action plugins in the controller process before the first task.
    type: bool
    default: true
    env:
      - name: DFLASH_PRELOAD_PLUGINS
    ini:
      - section: dflash_deploy_summary
        key: preload
"""

import copy
import threading
import time

from ansible import constants as C
from ansible import context
from ansible.plugins.callback import CallbackBase
from ansible_collections.dflash.deploy.plugins.module_utils.perf.gate import number

# What a failed task's result says, shared with the failure filters (plugins/filter/failure.py)
from ansible_collections.dflash.deploy.plugins.plugin_utils.failure import (
    failed_items,
    failure_cause,
    first_line,
    journal_lines,
)
from ansible_collections.dflash.deploy.plugins.plugin_utils.preload import preload

REPORT_FACT = "dflash_deploy_report"


def phase_of(task) -> str:
    """The phase a task belongs to: its role's short name, else "play"."""
    role = getattr(task, "_role", None)
    name = role.get_name(include_role_fqcn=False) if role is not None else ""
    return name or "play"


def task_name(task) -> str:
    """The task's own name, without the "<role> : " prefix Ansible puts before it."""
    return task.get_name().rsplit(" : ", 1)[-1]


def figures_text(figures) -> str:
    """An instance's measured figures in one phrase: time to first token, inter-token latency,
    output tokens per second and, with a speculative algorithm, tokens per verify step."""
    figures = figures if isinstance(figures, dict) else {}
    parts = []
    for key, label, unit in (("ttft_ms", "time to first token", " ms"),
                             ("itl_ms", "inter-token latency", " ms"),
                             ("output_tokens_per_s", "", " tokens/s"),
                             ("acceptance", "acceptance", " tokens per verify step")):
        value = figures.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            parts.append(f"{label + ' ' if label else ''}{number(value)}{unit}")
    return ", ".join(parts)


def perf_lines(perf) -> list:
    """One line per instance the performance gate saw (the report's ``perf``: {instance: {release,
    status, baseline_release, figures, reason, message}}): its verdict and its figures."""
    out = []
    for name, rep in sorted((perf or {}).items()) if isinstance(perf, dict) else []:
        rep = rep if isinstance(rep, dict) else {}
        status, figs = rep.get("status"), figures_text(rep.get("figures"))
        if status == "passed":
            what = f"passed against release {rep.get('baseline_release')}"
        elif status == "no_baseline":
            what = "recorded, nothing to compare with (no figures of a release before it)"
        elif status == "not_comparable":
            what = f"recorded, not compared: {rep.get('reason')}"
        elif status in ("refused", "error"):
            what = f"{status}: {first_line(rep.get('message'))}"
            figs = "" if status == "error" else figs
        else:
            what = f"not measured: {rep.get('reason') or rep.get('message') or status}"
        out.append(f"  performance {name}: {what}" + (f"; {figs}" if figs else ""))
    return out


def ignored_unreachable(task) -> bool:
    """Whether the task said ignore_unreachable: its host stays in the play, and what did not answer
    is the host it delegated to (a reachability check), not this one."""
    return getattr(task, "ignore_unreachable", False) is True


class HostRecord:
    """What one host did in this run."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.changed: dict[str, list] = {}
        self.failure: dict | None = None
        self.unreachable: str | None = None
        self.report: dict | None = None  # set by the play's dflash_deploy_report fact

    def add(self, phase: str, seconds: float, changed_task: str | None) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds
        if changed_task:
            self.changed.setdefault(phase, []).append(changed_task)


def fast_path_lines(fast_path) -> list:
    """Whether the run ended after comparing the host with its record (roles/deploy_state), or why
    it took the full path (the first three reasons)."""
    if not isinstance(fast_path, dict):
        return []
    if fast_path.get("taken"):
        return ["  fast path: the host is as its last completed deploy left it, and serving; nothing else ran"]
    reasons = [str(r) for r in fast_path.get("reasons") or [] if r]
    if not reasons:
        return []
    more = f" (+{len(reasons) - 3} more)" if len(reasons) > 3 else ""
    return [f"  full run: {'; '.join(reasons[:3])}{more}"]


def format_host(host: str, rec: HostRecord, check: bool = False) -> list:
    """The lines printed for one host at the end of the run (in check mode: what would change)."""
    timing = ", ".join(f"{p} {s:.0f}s" for p, s in sorted(rec.seconds.items(), key=lambda kv: -kv[1]) if s >= 0.5)
    if rec.unreachable:
        return [f"{host}: UNREACHABLE - {rec.unreachable}"]
    if rec.failure:
        out = [f"{host}: FAILED in {rec.failure['phase']} at \"{rec.failure['task']}\"",
               f"  cause: {rec.failure['cause']}"]
        out += [f"  journal: {line}" for line in rec.failure["journal"]]
        if (rec.report or {}).get("release"):
            out.append(f"  running release kept: {rec.report['release']}")
        out += perf_lines((rec.report or {}).get("perf"))
        out += fast_path_lines((rec.report or {}).get("fast_path"))
        if timing:
            out.append(f"  time: {timing}")
        return out
    report = rec.report or {}
    head = f"{host}: ok" + (" (check mode: nothing was changed)" if check else "")
    if report.get("release"):
        head += f", release {report['release']}"
    out = [head]
    verb = "would change" if check else "changed"
    out += [f"  {verb}: {line}" for line in report.get("changes") or []]
    if rec.changed:
        for phase in sorted(rec.changed):
            tasks = rec.changed[phase]
            shown = "; ".join(tasks[:4]) + (f"; +{len(tasks) - 4} more" if len(tasks) > 4 else "")
            out.append(f"  tasks that {'would change' if check else 'changed'} in {phase}: {shown}")
    elif not report.get("changes"):
        out.append(f"  {verb}: nothing (already converged)")
    out += fast_path_lines(report.get("fast_path"))
    if timing:
        out.append(f"  time: {timing}")
    for url in report.get("health_url") or []:
        out.append(f"  health: {url}")
    if report.get("models"):
        out.append(f"  serving: {', '.join(map(str, report['models']))}")
    out += perf_lines(report.get("perf"))
    return out


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dflash.deploy.deploy_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.quiet = str(C.DEFAULT_STDOUT_CALLBACK).endswith("json")
        self.hosts: dict[str, HostRecord] = {}
        self._task = None
        self._task_started = 0.0
        self._running: set = set()
        self._host_start: dict[str, float] = {}
        self._lock = threading.Lock()
        # failed loop items per (host, task), in the order the run reported them
        self._failed_items: dict[tuple, list] = {}
        self._ticker = None
        self._stop = threading.Event()

    # -- progress ------------------------------------------------------------------------------
    def _interval(self) -> int:
        try:
            return int(self.get_option("interval"))
        except Exception:  # options not loaded (unit tests)
            return 15

    def _tick(self, task_name: str, started: float, stop: threading.Event) -> None:
        interval = self._interval()
        while interval > 0 and not stop.wait(interval):
            with self._lock:
                hosts = sorted(self._running)
            if hosts:
                self._display.display(f"  ... {task_name}: still running on {', '.join(hosts)} "
                                      f"({time.monotonic() - started:.0f}s)")

    def _start_ticker(self, task) -> None:
        self._stop_ticker()
        self._stop = threading.Event()
        if self.quiet:
            return
        self._ticker = threading.Thread(target=self._tick, args=(task.get_name(), time.monotonic(), self._stop),
                                        daemon=True)
        self._ticker.start()

    def _stop_ticker(self) -> None:
        self._stop.set()

    def v2_playbook_on_start(self, playbook):
        try:
            wanted = self.get_option("preload")
        except Exception:  # options not loaded (unit tests)
            wanted = False
        if wanted:
            for name, error in preload()["failed"].items():
                self._display.vvv(f"dflash.deploy.deploy_summary: not preloaded {name}: {error}")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task = task
        self._task_started = time.monotonic()
        with self._lock:
            self._running = set()
        self._start_ticker(task)

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def v2_runner_on_start(self, host, task):
        with self._lock:
            self._running.add(host.get_name())
            self._host_start[host.get_name()] = time.monotonic()

    # -- results -------------------------------------------------------------------------------
    def _record(self, result, changed: bool) -> HostRecord:
        host = result._host.get_name()
        rec = self.hosts.setdefault(host, HostRecord())
        with self._lock:
            self._running.discard(host)
            started = self._host_start.pop(host, self._task_started)
            self._failed_items.pop((host, result._task._uuid), None)
        task = result._task
        rec.add(phase_of(task), time.monotonic() - started, task_name(task) if changed else None)
        facts = result._result.get("ansible_facts") or {}
        if isinstance(facts.get(REPORT_FACT), dict):
            rec.report = dict(facts[REPORT_FACT])
        return rec

    def v2_runner_on_ok(self, result):
        self._record(result, bool(result._result.get("changed")))

    def v2_runner_on_skipped(self, result):
        self._record(result, False)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        with self._lock:
            reported = self._failed_items.get((result._host.get_name(), result._task._uuid), [])
        rec = self._record(result, False)
        if ignore_errors:
            return
        if rec.failure is not None and (rec.report or {}).get("status") == "failed":
            # The play's rescue reported this host's failure (its dflash_deploy_report) and fails the
            # host again: the failure stands as first recorded, in its phase and task.
            return
        res = result._result
        items = failed_items(res, reported)
        rec.failure = {"phase": phase_of(result._task), "task": task_name(result._task),
                       "cause": failure_cause(res, reported), "journal": journal_lines(items[0] if items else res)}

    def v2_runner_on_unreachable(self, result):
        rec = self._record(result, False)
        if ignored_unreachable(result._task):
            # A delegated check (ignore_unreachable) of another host: this host stays in the play.
            return
        rec.unreachable = first_line(result._result.get("msg")) or "unreachable"

    def v2_runner_item_on_ok(self, result):
        pass

    def v2_runner_item_on_failed(self, result):
        # the item's own result: on ansible-core 2.21 the loop's results no longer say which items failed
        with self._lock:
            self._failed_items.setdefault((result._host.get_name(), result._task._uuid), []).append(
                dict(result._result))

    def v2_playbook_on_stats(self, stats):
        self._stop_ticker()
        if self.quiet:
            return
        for line in summary_lines(self.hosts, stats, bool(context.CLIARGS.get("check"))):
            self._display.display(line)


def summary_lines(hosts: dict, stats, check: bool = False) -> list:
    """The end-of-run block: only for runs that report (a play set dflash_deploy_report), one
    entry per host; a failure that a rescue handled (the host ended without failures) is not one."""
    if not any(rec.report is not None for rec in hosts.values()):
        return []
    out = ["", "DFLASH DEPLOY SUMMARY " + "*" * 58]
    for host in sorted(hosts):
        rec = hosts[host]
        counts = stats.summarize(host) if stats is not None else {}
        if rec.failure and not counts.get("failures", 1):
            rec = copy.copy(rec)
            rec.failure = None
        out += format_host(host, rec, check)
    return out
