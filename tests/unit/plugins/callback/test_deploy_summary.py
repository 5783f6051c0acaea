"""deploy_summary: what the operator reads at the end of a deploy, from what the run recorded."""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.callback.deploy_summary import (
    HostRecord,
    format_host,
    journal_lines,
    summary_lines,
)


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


def test_a_rerun_says_nothing_changed():
    rec = HostRecord()
    rec.report = {"release": "38daf6d080f8bba8"}
    rec.add("sglang_venv", 1.0, None)
    assert "  changed: nothing (already converged)" in format_host("ct200", rec)


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
