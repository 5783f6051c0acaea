"""failure_report / failure_message: a failed host's failure as the play's rescue publishes it."""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.filter.failure import HIDDEN, failure_message, failure_report

# What a rescue gets: the failed task squashed (no role) and its result as the module returned it.
TASK = {"name": "Fail with the diagnosis", "action": "ansible.builtin.fail", "no_log": False}
RESULT = {"failed": True, "changed": False,
          "msg": "instance qwen3-8b did not become ready on release 5c1e\nRuntimeError: draft KV cache layout mismatch"}


def test_the_task_the_first_line_and_the_journal_lines():
    assert failure_report(TASK, RESULT) == {
        "task": "Fail with the diagnosis",
        "cause": "instance qwen3-8b did not become ready on release 5c1e",
        "journal": ["RuntimeError: draft KV cache layout mismatch"]}
    assert failure_message(TASK, RESULT) == RESULT["msg"]


def test_a_loop_names_the_failing_item_and_its_own_journal():
    result = {"failed": True, "msg": "One or more items failed", "results": [
        {"failed": False, "msg": "All assertions passed", "_ansible_item_label": "qwen3-8b GPU 1"},
        {"failed": True, "msg": "instance probe: GPU 9 is not listed\njournal line",
         "_ansible_item_label": "probe GPU 9", "item": [{"name": "probe", "api_key": "sk-not-shown"}, 9]}]}
    report = failure_report({"name": "Refuse an assigned GPU"}, result)
    assert report == {"task": "Refuse an assigned GPU",
                      "cause": "instance probe: GPU 9 is not listed (item probe GPU 9)", "journal": ["journal line"]}
    assert "sk-not-shown" not in str(report)
    assert failure_message({}, result) == "One or more items failed"  # the task's own msg, as the run printed it


def test_no_log_hides_the_message_and_the_journal():
    secret = {"failed": True, "msg": "key sk-secret rejected\nsk-secret in the journal", "stdout": "sk-secret"}
    for task, result in (({**TASK, "no_log": True}, secret), (TASK, {**secret, "_ansible_no_log": True})):
        report = failure_report(task, result)
        assert report == {"task": "Fail with the diagnosis", "cause": HIDDEN, "journal": []}
        assert failure_message(task, result) == HIDDEN
    # one hidden item of a loop: its text never shows, the loop's own line does
    looped = {"failed": True, "msg": "One or more items failed",
              "results": [{**secret, "_ansible_no_log": True, "_ansible_item_label": "a"}]}
    report = failure_report(TASK, looped)
    assert "sk-secret" not in str(report) and report["cause"] == "One or more items failed"


def test_nothing_known_still_reports():
    # a host failed by another host's run_once task gets no ansible_failed_task/result
    assert failure_report({}, {}) == {"task": "", "cause": "failed", "journal": []}
    assert failure_report(None, "text") == {"task": "", "cause": "failed", "journal": []}
    unnamed = failure_report({"action": "ansible.builtin.command"},
                             {"failed": True, "msg": "", "stderr": "flock: timeout\nmore"})
    assert unnamed == {"task": "ansible.builtin.command", "cause": "flock: timeout", "journal": []}
    assert failure_message({}, {"failed": True, "stderr": "flock: timeout"}) == "flock: timeout"
