# -*- coding: utf-8 -*-
# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Record every task result of a run as one JSON line (tests/gpu only, not shipped).

Enabled by tests/gpu/deploy.sh with ANSIBLE_CALLBACK_PLUGINS=tests/gpu/callback_plugins,
ANSIBLE_CALLBACKS_ENABLED=gpu_record and GPU_RECORD_FILE=<file>; the normal stdout
callback still prints the run.
"""
from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_record
type: notification
short_description: one JSON line per task result (tests/gpu)
description: Writes task name, host, status, duration and the interesting result keys to $GPU_RECORD_FILE.
"""

import json  # noqa: E402 (DOCUMENTATION first, as Ansible plugins have it)
import os  # noqa: E402
import time  # noqa: E402

from ansible.plugins.callback import CallbackBase  # noqa: E402

KEYS = ("msg", "elapsed", "size", "bundle", "files_copied", "files_linked", "bytes_copied", "bytes_linked",
        "moved", "removed", "changed", "rc", "compatible", "cmd", "stderr_lines", "findings", "unsatisfied",
        "imports", "torch", "gpus", "cuda_driver_version", "driver_version", "assertion", "stat", "placed", "transfer")


def _short(value, limit=6000):
    text = json.dumps(value, default=str)
    return value if len(text) <= limit else text[:limit] + "...(cut)"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "gpu_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._path = os.environ.get("GPU_RECORD_FILE")
        self._start = {}

    def _write(self, record):
        if self._path:
            with open(self._path, "a") as fh:
                fh.write(json.dumps(record, default=str) + "\n")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start[task._uuid] = time.time()

    def v2_playbook_on_handler_task_start(self, task):
        self._start[task._uuid] = time.time()

    def _result(self, result, status):
        task = result._task
        res = dict(result._result)
        rec = {"task": task.get_name(), "host": result._host.get_name(), "status": status,
               "changed": bool(res.get("changed")),
               "seconds": round(time.time() - self._start.get(task._uuid, time.time()), 3)}
        for key in KEYS:
            if key in res and key != "changed":
                rec[key] = _short(res[key])
        if "results" in res:  # a loop: the failed or changed items, shortly
            rec["items"] = [_short({k: r.get(k) for k in ("item", "changed", "failed", "msg", "compatible", "elapsed")
                                    if k in r}, 1500)
                            for r in res["results"] if r.get("failed") or r.get("changed")][:10]
        self._write(rec)

    def v2_runner_on_ok(self, result):
        self._result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        hosts = sorted(stats.processed.keys())
        self._write({"stats": {h: stats.summarize(h) for h in hosts}})
