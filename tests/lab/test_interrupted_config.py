"""A deploy killed between its configuration writes and its restart is finished by the next run.

Against ct200 (reliability row 70): a deploy that adds a variable to the instance's environment is
killed (SIGKILL to its process group, as a controller that dies leaves it) once the env file on the
host holds the variable, before the restart. The server runs on with the process and environment it
had. Its lock token removed (as the host_lock README says), `--check` names the restart and changes
nothing; the same deploy again finds the env file
converged, sees that the process started before the file was last written, says so and restarts it:
the server then runs with the variable, and no configuration backup is left. A third run restarts
nothing.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

from conftest import REPO, VENV_BIN, ansible_env
from test_security import INSTANCE, deploy, sh, with_instances

VARIABLE = "DFLASH_INTERRUPTED_RUN"
UNIT = "sglang-dflash@qwen3-8b.service"


SAY = "Say which instances restart onto the files an interrupted run wrote"


def said(out: dict) -> list[str]:
    """The messages of sglang_service's task that names the instances it restarts for an interrupted run."""
    [results] = [r for name, r in out["results"].items() if name.endswith(" : " + SAY)] or [[]]
    return [item["msg"] for res in results for item in res.get("results") or [] if item.get("msg")]


def main_pid() -> str:
    return sh(f"systemctl show -p MainPID --value {UNIT}").strip()


def environ(pid: str) -> str:
    return sh(f"tr '\\0' '\\n' < /proc/{pid}/environ")


def test_a_run_killed_after_its_writes_is_finished_by_the_next():
    out = deploy(*with_instances(INSTANCE), label="before the interrupted run")
    assert out["rc"] == 0, out["failed"]
    before = main_pid()
    assert VARIABLE not in environ(before)

    args = with_instances(INSTANCE, environment={VARIABLE: "1"})
    proc = subprocess.Popen([str(VENV_BIN / "ansible-playbook"), "playbooks/deploy_dflash.yml", "-l", "ct200", *args],
                            cwd=REPO, env=ansible_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if sh(f"grep -c {VARIABLE} /etc/dflash/qwen3-8b.env || true").strip() not in ("", "0"):
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the deploy ended before its env file write was seen"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    time.sleep(2)
    assert main_pid() == before, "the killed run had restarted the server already: no window was hit"
    assert VARIABLE not in environ(before)
    sh("rm -f /run/dflash-deploy.token-*")

    check = deploy(*args, "--check", label="--check after the interrupted run")
    assert check["rc"] == 0, check["failed"]
    assert [line.split(" (")[0] for line in said(check)] == [
        f"{UNIT} started before /etc/dflash/qwen3-8b.env last changed"]
    assert main_pid() == before

    again = deploy(*args, label="after the interrupted run")
    assert again["rc"] == 0, again["failed"]
    lines = said(again)
    assert len(lines) == 1 and lines[0].startswith(f"{UNIT} started before /etc/dflash/qwen3-8b.env last changed"), \
        lines
    after = main_pid()
    assert after != before and f"{VARIABLE}=1" in environ(after).splitlines()
    assert sh("ls /etc/dflash /etc/systemd/system/sglang-dflash@qwen3-8b.service.d | grep -c '~$' || true").strip() \
        == "0"

    third = deploy(*args, label="a third run")
    assert third["rc"] == 0, third["failed"]
    assert main_pid() == after and said(third) == [], "a third run restarted the server again"
