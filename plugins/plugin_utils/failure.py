# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a failed task's result says, in the words the operator reads: its first line, the failed items of
a loop, the journal lines a readiness failure carried. Controller side, pure: the deploy_summary callback
prints them and the failure filters (plugins/filter/failure.py) put them in the host's report, so the two
say the same thing without one plugin importing the other."""
from __future__ import annotations

MAX_JOURNAL_LINES = 8


def first_line(text) -> str:
    for line in str(text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def item_label(value) -> str:
    """A short label for a loop item: a scalar as it is, a dict by its name alone (an instance's
    item also holds its API key), a list by the labels of its parts."""
    if isinstance(value, (str, int, float)):
        text = str(value)
    elif isinstance(value, dict):
        name = value.get("name")
        text = str(name) if isinstance(name, (str, int)) else ""
    elif isinstance(value, (list, tuple)):
        text = " ".join(filter(None, (item_label(part) for part in value)))
    else:
        text = ""
    return text if len(text) <= 80 else text[:77] + "..."


def failed_items(result: dict, reported=None) -> list:
    """The items of a looped task that failed, in loop order (none for a task without a loop): those
    its results mark ``failed``; or, where the results carry no such mark (ansible-core 2.21 keeps
    ``failed`` out of the results that callbacks see), the items the run reported failed one by one
    (v2_runner_item_on_failed), given as ``reported``."""
    marked = [r for r in result.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    return marked or [r for r in reported or [] if isinstance(r, dict)]


def failure_cause(result: dict, reported=None) -> str:
    """The first line of why a task failed. For a loop, whose own msg is only "One or more items
    failed", the first failing item's own message, with its label and how many more items failed
    (``reported``: the failed items' results, as failed_items takes them)."""
    items = failed_items(result, reported)
    if not items:
        return first_line(result.get("msg") or result.get("stderr") or result.get("module_stderr")
                          or result.get("censored") or "failed")
    cause = failure_cause(items[0])
    label = item_label(items[0].get("_ansible_item_label", items[0].get("item")))
    notes = ([f"item {label}"] if label else []) + \
        ([f"{len(items) - 1} more item{'s' if len(items) > 2 else ''} failed"] if len(items) > 1 else [])
    return cause + (f" ({'; '.join(notes)})" if notes else "")


def journal_lines(result: dict) -> list:
    """Journal lines a failed readiness task carried (its msg or a `journal` field)."""
    lines = result.get("journal")
    if isinstance(lines, str):
        lines = lines.splitlines()
    if not lines:
        msg = str(result.get("msg") or "")
        lines = [line for line in msg.splitlines()[1:] if line.strip()]
    return [str(line) for line in lines][-MAX_JOURNAL_LINES:]
