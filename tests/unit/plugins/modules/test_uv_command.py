"""uv_command run as Ansible runs it (security m4): an index URL with credentials reaches the program through
its environment only - not its command line (what any local user reads in /proc/<pid>/cmdline) - and the
credentials are masked in everything the module returns, the failure message included."""
from __future__ import annotations

import datetime
import json
import stat
from pathlib import Path

from module_runner import INJECT_INVOCATION, run_module

TOKEN = "s3cr3t-T0ken"
INDEX = f"https://deploy:{TOKEN}@packages.example.com/simple"
PROXY = "http://ops:hunter22@proxy.example.com:3128"


def _fake_uv(tmp_path: Path, rc: int = 0) -> Path:
    """A stand-in for uv: records its own /proc/self/cmdline and environment, echoes the index as uv would
    name it in an error, reads stdin."""
    seen = tmp_path / "seen.json"
    prog = tmp_path / "uv"
    prog.write_text(f"""#!/usr/bin/env python3
import json, os, sys
cmdline = open("/proc/self/cmdline", "rb").read().decode().split("\\0")
json.dump({{"cmdline": cmdline, "env": dict(os.environ), "stdin": sys.stdin.read()}}, open({str(seen)!r}, "w"))
print("pkg==1.0")
print("error: Failed to fetch: `" + os.environ.get("UV_DEFAULT_INDEX", "") + "/pkg/`", file=sys.stderr)
sys.exit({rc})
""")
    prog.chmod(prog.stat().st_mode | stat.S_IXUSR)
    return prog


def test_the_index_reaches_uv_in_its_environment_never_its_command_line(tmp_path):
    prog = _fake_uv(tmp_path)
    env = {"UV_NO_CONFIG": "1", "UV_DEFAULT_INDEX": INDEX, "UV_INDEX": "http://127.0.0.1:9/extra", "https_proxy": PROXY}
    rc, out = run_module("uv_command", {"argv": [str(prog), "pip", "compile", "-"], "stdin": "sglang==0.5.11",
                                        "env": env, **INJECT_INVOCATION})
    assert rc == 0, out
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["cmdline"][-3:-1] == ["compile", "-"]
    assert not any(TOKEN in a or "hunter22" in a for a in seen["cmdline"])
    assert {k: seen["env"][k] for k in env} == env and seen["stdin"] == "sglang==0.5.11"
    assert out["stdout"] == "pkg==1.0" and out["cmd"] == [str(prog), "pip", "compile", "-"]
    text = json.dumps(out)
    assert out["invocation"]["module_args"]["env"]["UV_DEFAULT_INDEX"] == "https://********@packages.example.com/simple"
    assert TOKEN not in text and "hunter22" not in text  # masked everywhere, the invocation included
    assert "Failed to fetch" in out["stderr"]
    # the run's own start and end on the host, as the command module gives them (the fleet scenario reads them)
    start, end = (datetime.datetime.strptime(out[k], "%Y-%m-%d %H:%M:%S.%f") for k in ("start", "end"))
    assert start <= end and out["delta"].startswith("0:00:")


def test_a_failure_names_the_index_with_its_credentials_written_as_stars(tmp_path):
    prog = _fake_uv(tmp_path, rc=2)
    rc, out = run_module("uv_command", {"argv": [str(prog), "pip", "sync"], "env": {"UV_DEFAULT_INDEX": INDEX}})
    assert rc == 1 and out["failed"] is True and out["rc"] == 2
    assert out["msg"] == "uv exited 2: error: Failed to fetch: `https://***@packages.example.com/simple/pkg/`"
    assert TOKEN not in json.dumps(out)


def test_check_mode_runs_nothing_and_a_missing_program_is_one_line(tmp_path):
    prog = _fake_uv(tmp_path)
    rc, out = run_module("uv_command", {"argv": [str(prog)], "env": {}}, check=True)
    assert rc == 0 and out["skipped"] is True and not (tmp_path / "seen.json").exists()
    rc, out = run_module("uv_command", {"argv": [str(tmp_path / "nothing")]})
    assert rc == 1
    assert out["msg"] == "nothing exited (not started): %s: No such file or directory" % (tmp_path / "nothing")
