# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""failure_report / failure_message: a failed host's failure, in the deploy summary's words, for a play's rescue.

    {{ ansible_failed_task | default({}) | dflash.deploy.failure_report(ansible_failed_result | default({})) }}
      ->  {"task": "Fail with the diagnosis", "cause": "instance qwen3-8b did not become ready ...",
           "journal": ["RuntimeError: ..."]}
    {{ ansible_failed_task | default({}) | dflash.deploy.failure_message(ansible_failed_result | default({})) }}
      ->  the failed task's own msg, to fail the host again with

A rescue gets the failed task and its result as Ansible kept them: the task without its role
(so the phase the deploy summary prints is not known here) and the result before any censoring.
The cause and the journal lines are the summary's own (plugins/callback/deploy_summary.py:
failure_cause, journal_lines); a task or result under no_log gives Ansible's hidden-output text
and no journal lines, as the callbacks print it.
"""
from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.dflash.deploy.plugins.plugin_utils.failure import failed_items, failure_cause, journal_lines

HIDDEN = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"
# What Ansible keeps of a result it hides (besides the text that says so).
KEPT_WHEN_HIDDEN = ("attempts", "changed", "retries")


def _hide(result: Mapping) -> dict:
    return {**{key: result[key] for key in KEPT_WHEN_HIDDEN if key in result}, "censored": HIDDEN}


def visible_result(task, result) -> dict:
    """The result as the callbacks see it: hidden when the task or the result is under no_log,
    each looped item hidden when its own result is."""
    task = task if isinstance(task, Mapping) else {}
    result = dict(result) if isinstance(result, Mapping) else {}
    if task.get("no_log") is True or result.get("_ansible_no_log"):
        hidden = _hide(result)
        items = result.get("results")
        if isinstance(items, list):
            hidden["results"] = [_hide(r) if isinstance(r, Mapping) and r.get("_ansible_no_log") else r for r in items]
        return hidden
    items = result.get("results")
    if isinstance(items, list):
        result["results"] = [_hide(r) if isinstance(r, Mapping) and r.get("_ansible_no_log") else r for r in items]
    return result


def failure_report(task, result) -> dict:
    """{"task", "cause", "journal"} of a failure: the failed task's name (its action when it has
    none), the first line of why it failed, and the journal lines the failure carried."""
    task = task if isinstance(task, Mapping) else {}
    shown = visible_result(task, result)
    items = failed_items(shown)
    return {"task": str(task.get("name") or task.get("action") or ""),
            "cause": failure_cause(shown),
            "journal": journal_lines(items[0] if items else shown)}


def failure_message(task, result) -> str:
    """The failed task's own msg (hidden under no_log), else the cause: what the host fails with again."""
    shown = visible_result(task, result)
    msg = shown.get("msg")
    if msg is None or msg == "":
        return failure_cause(shown)
    return msg if isinstance(msg, str) else str(msg)


class FilterModule:
    def filters(self):
        return {"failure_report": failure_report, "failure_message": failure_message}
