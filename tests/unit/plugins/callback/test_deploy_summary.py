"""deploy_summary: what the operator reads at the end of a deploy, from what the run recorded."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ansible.playbook.task import Task
from ansible_collections.dflash.deploy.plugins.callback.deploy_summary import (
    CallbackModule,
    HostRecord,
    failure_cause,
    format_host,
    journal_lines,
    perf_lines,
    summary_lines,
)
from ansible_collections.dflash.deploy.plugins.plugin_utils.failure import item_label
from conftest import REPO


class Stats:
    def __init__(self, **per_host):
        self.per_host = per_host

    def summarize(self, host):
        return self.per_host.get(host, {"failures": 0})


def converged():
    rec = HostRecord()
    rec.report = {"release": "38daf6d080f8bba8", "health_url": ["http://10.89.64.200:30001/health_generate"],
                  "models": ["qwen3-8b-dflash"]}
    rec.add("sglang_venv", 12.4, "Install the locked package set (uv pip sync)")
    rec.add("sglang_service", 3.2, "Restart sglang-dflash instances")
    rec.add("play", 0.1, None)
    return rec


def test_a_deployed_host_shows_release_changes_times_health_and_model():
    lines = format_host("ct200", converged())
    assert lines[0] == "ct200: ok, release 38daf6d080f8bba8"
    assert "  tasks that changed in sglang_venv: Install the locked package set (uv pip sync)" in lines
    assert "  time: sglang_venv 12s, sglang_service 3s" in lines
    assert "  health: http://10.89.64.200:30001/health_generate" in lines
    assert lines[-1] == "  serving: qwen3-8b-dflash"


FIGURES = {"ttft_ms": 41.23, "itl_ms": 7.95, "output_tokens_per_s": 118.3, "acceptance": 3.123, "requests": 4}


def test_each_instance_the_gate_measured_shows_its_verdict_and_figures():
    rec = converged()
    rec.report["perf"] = {
        "qwen3-8b": {"release": "5c1e", "status": "passed", "baseline_release": "38da", "figures": FIGURES},
        "probe": {"release": "5c1e", "status": "no_baseline", "figures": dict(FIGURES, acceptance=None)},
        "other": {"release": "5c1e", "status": "not_comparable", "figures": FIGURES,
                  "reason": "release 38da was measured on other GPUs (GPU-a, these GPU-b)"},
        "off": {"release": "5c1e", "status": "off", "figures": None,
                "reason": "the performance gate is off for this instance"}}
    lines = format_host("ct200", rec)
    assert lines[-4:] == [
        "  performance off: not measured: the performance gate is off for this instance",
        "  performance other: recorded, not compared: release 38da was measured on other GPUs (GPU-a, these GPU-b); "
        "time to first token 41.2 ms, inter-token latency 7.95 ms, 118 tokens/s, acceptance 3.12 tokens per verify "
        "step",
        "  performance probe: recorded, nothing to compare with (no figures of a release before it); "
        "time to first token 41.2 ms, inter-token latency 7.95 ms, 118 tokens/s",
        "  performance qwen3-8b: passed against release 38da; time to first token 41.2 ms, inter-token latency "
        "7.95 ms, 118 tokens/s, acceptance 3.12 tokens per verify step"]


def test_a_refused_release_shows_the_figure_in_the_failed_block():
    rec = converged()
    line = ("the performance gate refused release 5c1e against release 38da: inter-token latency 50.1 ms against "
            "7.95 ms for release 38da (+530 %, limit +20 %)")
    rec.report["perf"] = {"qwen3-8b": {"release": "5c1e", "status": "refused", "message": line,
                                       "figures": dict(FIGURES, itl_ms=50.1)},
                          "probe": {"release": "5c1e", "status": "error", "figures": None,
                                    "message": "the performance probe could not measure http://127.0.0.1:30002: "
                                               "timed out\ntraceback"}}
    rec.failure = {"phase": "sglang_service", "task": "Fail with the diagnosis", "journal": [],
                   "cause": "sglang-dflash@qwen3-8b.service did not pass the performance gate: " + line}
    lines = format_host("ct200", rec)
    assert "  performance qwen3-8b: refused: " + line + "; time to first token 41.2 ms, inter-token latency " \
        "50.1 ms, 118 tokens/s, acceptance 3.12 tokens per verify step" in lines
    assert "  performance probe: error: the performance probe could not measure http://127.0.0.1:30002: timed out" \
        in lines
    # a report without the gate (a converged re-run restarted nothing) has no such line
    assert perf_lines({}) == [] and perf_lines(None) == []


def test_a_rerun_says_nothing_changed():
    rec = HostRecord()
    rec.report = {"release": "38daf6d080f8bba8"}
    rec.add("sglang_venv", 1.0, None)
    assert "  changed: nothing (already converged)" in format_host("ct200", rec)


def test_the_fast_path_says_it_ended_there_or_why_the_full_path_ran():
    rec = HostRecord()
    rec.report = {"release": "38daf6d080f8bba8", "fast_path": {"taken": True, "reasons": []}}
    lines = format_host("ct200", rec)
    assert "  changed: nothing (already converged)" in lines
    assert "  fast path: the host is as its last completed deploy left it, and serving; nothing else ran" in lines
    rec.report["fast_path"] = {"taken": False, "reasons": ["a", "b", "c", "d", "e"]}
    assert "  full run: a; b; c (+2 more)" in format_host("ct200", rec)
    rec.report["fast_path"] = {"taken": False, "reasons": []}
    assert not [line for line in format_host("ct200", rec) if "full run" in line or "fast path" in line]
    failed = HostRecord()
    failed.failure = {"phase": "sglang_service", "task": "Verify", "cause": "import failed", "journal": []}
    failed.report = {"status": "failed", "fast_path": {"taken": False, "reasons": ["files of release /r changed"]}}
    assert "  full run: files of release /r changed" in format_host("ct200", failed)


def test_a_failed_host_shows_the_root_cause_and_the_journal():
    rec = converged()
    rec.failure = {"phase": "sglang_service", "task": "Refuse a release that is not verified",
                   "cause": "release 1234 is not verified: import name sgl_kernel is owned by sgl-kernel and "
                            "sglang-kernel",
                   "journal": journal_lines({"msg": "readiness failed\nTraceback (most recent call last):\n"
                                                    "ImportError: libcudart.so.13: cannot open shared object file"})}
    lines = format_host("ct200", rec)
    assert lines[0] == 'ct200: FAILED in sglang_service at "Refuse a release that is not verified"'
    assert lines[1].startswith("  cause: release 1234 is not verified: import name sgl_kernel")
    assert "  journal: ImportError: libcudart.so.13: cannot open shared object file" in lines
    assert "  running release kept: 38daf6d080f8bba8" in lines


def test_rescued_failures_are_not_reported_and_non_deploy_runs_print_nothing():
    rec = converged()
    rec.failure = {"phase": "sglang_service", "task": "Wait", "cause": "timeout", "journal": []}
    lines = summary_lines({"ct200": rec}, Stats(ct200={"failures": 0, "rescued": 1}))
    assert "ct200: ok, release 38daf6d080f8bba8" in lines
    lines = summary_lines({"ct200": rec}, Stats(ct200={"failures": 1}))
    assert any(line.startswith("ct200: FAILED") for line in lines)
    plain = HostRecord()
    plain.add("play", 1.0, "something")
    assert summary_lines({"ct129": plain}, Stats()) == []


def test_unreachable_and_journal_field():
    rec = HostRecord()
    rec.report = {}
    rec.unreachable = "ssh: connect to host 192.0.2.200 port 22: Connection timed out"
    assert format_host("ct200", rec) == ["ct200: UNREACHABLE - ssh: connect to host 192.0.2.200 port 22: "
                                         "Connection timed out"]
    assert journal_lines({"journal": ["a", "b"]}) == ["a", "b"]
    assert journal_lines({"journal": "\n".join(str(i) for i in range(20))}) == [str(i) for i in range(12, 20)]


class Host:
    def get_name(self):
        return "ct200"


class Result:
    """What a callback gets for ct200's task: its host, the task and the result."""

    def __init__(self, task, result):
        self._host, self._task, self._result = Host(), task, result


def test_an_ignored_unreachable_delegated_check_does_not_make_the_host_unreachable():
    # ct200's task pinged the reference host (delegate_to, ignore_unreachable) and it did not answer: ct200
    # stays in the play, and the summary names its own failure, not "UNREACHABLE" for the other host's refusal.
    down = {"unreachable": True, "msg": "Failed to connect to the host via ssh: connect to host ct129: refused"}
    callback = CallbackModule()
    check = Task()
    check.name, check.ignore_unreachable = "Check that the reference host answers", True
    callback.v2_runner_on_unreachable(Result(check, down))
    assert callback.hosts["ct200"].unreachable is None
    assert format_host("ct200", callback.hosts["ct200"])[0] == "ct200: ok"
    # Not ignored: the host itself is out of the play, and the summary says so.
    read = Task()
    read.name = "Read"
    callback.v2_runner_on_unreachable(Result(read, down))
    assert format_host("ct200", callback.hosts["ct200"]) == [
        "ct200: UNREACHABLE - Failed to connect to the host via ssh: connect to host ct129: refused"]


def test_check_mode_says_what_would_change():
    lines = format_host("ct200", converged(), check=True)
    assert lines[0] == "ct200: ok (check mode: nothing was changed), release 38daf6d080f8bba8"
    assert "  tasks that would change in sglang_venv: Install the locked package set (uv pip sync)" in lines


def test_the_roles_own_words_come_first_and_replace_already_converged():
    rec = converged()
    rec.report["changes"] = ["release bbbb replaces aaaa: packages: torch 2.9.1+cu128 -> 2.11.0+cu130",
                             "env file /etc/dflash/a.env (contents not shown: it holds the API key)"]
    lines = format_host("ct200", rec, check=True)
    assert lines[1:3] == ["  would change: release bbbb replaces aaaa: packages: torch 2.9.1+cu128 -> 2.11.0+cu130",
                          "  would change: env file /etc/dflash/a.env (contents not shown: it holds the API key)"]
    quiet = HostRecord()
    quiet.report = {"release": "bbbb", "changes": ["launcher sglang-dflash-launch"]}
    lines = format_host("ct200", quiet)
    assert "  changed: launcher sglang-dflash-launch" in lines
    assert not any("nothing (already converged)" in line for line in lines)


# A looped assert as ansible-core 2.19 hands it to v2_runner_on_failed (recorded from a run of
# preflight's "Refuse an assigned GPU that is missing or fails the smoke test" shape): the task's
# own msg says only that an item failed; each item's result carries its msg and label.
LOOP_RESULT = {
    "results": [
        {"changed": False, "msg": "All assertions passed", "failed": False, "_ansible_no_log": False,
         "item": [{"name": "qwen3-8b", "port": 30001, "api_key": "sk-not-shown"}, 1], "ansible_loop_var": "item",
         "_ansible_item_label": "qwen3-8b GPU 1"},
        {"failed": True, "evaluated_to": False, "assertion": "_sglang_service_gpu is not none",
         "msg": "instance probe: GPU 9 is not listed by nvidia-smi (dead or absent); assign a healthy GPU in "
                "sglang_service_instances (nvidia-smi lists 0, 1, 2, 3)",
         "changed": False, "exception": "(traceback unavailable)", "_ansible_no_log": False,
         "item": [{"name": "probe", "port": 30002, "api_key": "sk-not-shown"}, 9], "ansible_loop_var": "item",
         "_ansible_item_label": "probe GPU 9"},
    ],
    "msg": "One or more items failed",
    "changed": False,
}


def test_a_looped_task_names_the_failing_items_own_message_and_label():
    assert failure_cause(LOOP_RESULT) == (
        "instance probe: GPU 9 is not listed by nvidia-smi (dead or absent); assign a healthy GPU in "
        "sglang_service_instances (nvidia-smi lists 0, 1, 2, 3) (item probe GPU 9)")


def test_a_loop_with_several_failures_names_the_first_and_counts_the_rest():
    failing = dict(LOOP_RESULT["results"][1])
    second = dict(failing, msg="instance other: GPU 8 is not listed by nvidia-smi", _ansible_item_label="other GPU 8")
    third = dict(failing, msg="instance last: GPU 7 is not listed", _ansible_item_label="last GPU 7")
    cause = failure_cause(dict(LOOP_RESULT, results=[*LOOP_RESULT["results"], second, third]))
    assert cause.startswith("instance probe: GPU 9 is not listed")
    assert cause.endswith("(item probe GPU 9; 2 more items failed)")
    two = failure_cause(dict(LOOP_RESULT, results=[failing, second]))
    assert two.endswith("(item probe GPU 9; 1 more item failed)")


def test_when_the_results_do_not_mark_failed_items_the_reported_ones_are_named():
    # ansible-core 2.21 keeps `failed` (and `_ansible_no_log`) out of the results callbacks see: the loop's
    # results no longer say which item failed; v2_runner_item_on_failed reported each one as it failed
    unmarked = dict(LOOP_RESULT, results=[{k: v for k, v in r.items() if k not in ("failed", "_ansible_no_log")}
                                          for r in LOOP_RESULT["results"]])
    assert failure_cause(unmarked) == "One or more items failed"
    reported = [unmarked["results"][1]]
    assert failure_cause(unmarked, reported) == failure_cause(LOOP_RESULT)
    other = dict(reported[0], msg="instance other: GPU 8 is not listed", _ansible_item_label="other GPU 8")
    assert failure_cause(unmarked, reported + [other]).endswith("(item probe GPU 9; 1 more item failed)")
    # where the results do mark them (2.19, 2.20), those stand
    assert failure_cause(LOOP_RESULT, [other]) == failure_cause(LOOP_RESULT)


def test_an_item_without_a_label_is_named_by_its_name_never_its_other_keys():
    # a file task over paths (the item is the label), and a loop over instance dicts without loop_control.label
    path_item = {"path": "/etc/x", "failed": True, "item": "/etc/x", "_ansible_item_label": "/etc/x",
                 "msg": "There was an issue creating /etc/x as requested: [Errno 30] Read-only file system: b'/etc/x'"}
    assert failure_cause({"results": [path_item], "msg": "One or more items failed"}).endswith("(item /etc/x)")
    dict_item = {"failed": True, "msg": "instance b: port 22 bad", "item": {"name": "b", "api_key": "sk-2"},
                 "_ansible_item_label": {"name": "b", "port": 22, "api_key": "sk-2"}}
    cause = failure_cause({"results": [dict_item], "msg": "One or more items failed"})
    assert cause == "instance b: port 22 bad (item b)" and "sk-2" not in cause
    assert item_label({"port": 22, "api_key": "sk-2"}) == ""
    assert item_label("x" * 200) == "x" * 77 + "..."
    # a command that failed: its stderr when msg says nothing
    cmd_item = {"failed": True, "msg": "", "stderr": "flock: cannot open lock file\nmore",
                "_ansible_item_label": "ct200"}
    assert failure_cause({"results": [cmd_item], "msg": "One or more items failed"}) == \
        "flock: cannot open lock file (item ct200)"


def test_without_a_loop_or_with_its_output_hidden_the_tasks_own_line_stands():
    assert failure_cause({"msg": "driver 570.133.20 supports CUDA 12.8\nsecond line"}) == \
        "driver 570.133.20 supports CUDA 12.8"
    hidden = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"
    censored = {"changed": False, "_ansible_no_log": True, "censored": hidden,
                "results": [{"changed": False, "_ansible_no_log": True, "censored": hidden},
                            {"changed": False, "_ansible_no_log": True, "exception": "(traceback unavailable)",
                             "censored": hidden}]}
    assert failure_cause(censored) == hidden


PLAYBOOK = """
- name: A deploy-shaped play whose looped preflight check fails on one item
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Report
      ansible.builtin.set_fact:
        dflash_deploy_report: {release: 38daf6d080f8bba8}
    - name: Refuse an assigned GPU that is missing
      ansible.builtin.assert:
        that: item.1 in [0, 1, 2]
        fail_msg: "instance {{ item.0.name }}: GPU {{ item.1 }} is not listed by nvidia-smi; assign a healthy GPU"
        quiet: true
      loop: [[{name: qwen3-8b, api_key: sk-e2e-secret}, 1], [{name: probe, api_key: sk-e2e-secret}, 9]]
      loop_control:
        label: "{{ item.0.name }} GPU {{ item.1 }}"
"""


def test_the_summary_of_a_real_failed_loop(tmp_path):
    """ansible-playbook with the collection's ansible.cfg (the callback enabled), a looped task failing on
    its second item: the summary's cause is that item's message, labelled."""
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                         cwd=REPO, capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 2, run.stdout + run.stderr
    summary = run.stdout.split("DFLASH DEPLOY SUMMARY", 1)[1].splitlines()
    assert summary[1] == 'localhost: FAILED in play at "Refuse an assigned GPU that is missing"', summary
    assert summary[2] == ("  cause: instance probe: GPU 9 is not listed by nvidia-smi; assign a healthy GPU "
                          "(item probe GPU 9)"), summary
    assert "sk-e2e-secret" not in "\n".join(summary)
