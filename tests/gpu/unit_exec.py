#!/usr/bin/env python3
"""Start a systemd template unit's instance the way systemd would, on a host without systemd.

    python3 tests/gpu/unit_exec.py --unit /etc/systemd/system/sglang-dflash@.service \
        --instance qwen3-8b --log LOG --out RESULT.json [--wait-port-env SGLANG_PORT] [--timeout 180]

Reads the unit file and its drop-ins (``<unit>.d/*.conf`` of the template and
of the instance, in name order) and starts ``ExecStart`` with:

* the environment systemd builds for a system service: ``PATH`` (systemd's
  default), ``HOME``/``USER``/``LOGNAME``/``SHELL`` of ``User=``, then every
  ``Environment=`` assignment, then every ``EnvironmentFile=`` (which
  overrides ``Environment=``, as systemd documents) — nothing inherited from
  the caller;
* ``User=``/``Group=`` (with the user's supplementary groups),
  ``WorkingDirectory=``, ``UMask=``, a new session;
* specifiers ``%i %I %n %N %p %%`` expanded, then ExecStart's ``$NAME`` and ``${NAME}``
  (``expand_env_words``).

Not reproduced (systemd only): the sandboxing directives (ProtectSystem=,
DevicePolicy=/DeviceAllow=, PrivateTmp=, …), cgroups, Restart=, timeouts;
they are listed in the result as ``not_applied``.

Then, if the environment names a port (``--wait-port-env``), it polls
``/health_generate`` and ``/v1/models`` on 127.0.0.1 until both answer 200 or
the timeout passes, records both answers, and stops the process as
``KillMode=mixed`` would (SIGTERM to the main process, SIGKILL to the rest
after ``--stop-timeout``), unless ``--keep-running`` leaves a healthy server
running (its pid is its process group). RESULT.json holds everything.
"""
from __future__ import annotations

import argparse
import grp
import json
import os
import pwd
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
APPLIED = {"User", "Group", "Environment", "EnvironmentFile", "WorkingDirectory", "UMask", "ExecStart", "Type"}


def parse_unit(paths: list[Path]) -> dict[str, list[str]]:
    """[Service] assignments of the unit and its drop-ins, in order (list-valued; empty value resets)."""
    svc: dict[str, list[str]] = {}
    for path in paths:
        section = None
        pending = ""
        for raw in path.read_text().splitlines():
            line = pending + raw.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                continue
            if section != "Service" or "=" not in line:
                continue
            key, value = (s.strip() for s in line.split("=", 1))
            if value == "":
                svc[key] = []
            else:
                svc.setdefault(key, []).append(value)
    return svc


def expand(value: str, unit: str, instance: str) -> str:
    prefix = unit.split("@", 1)[0]
    full = "%s@%s.service" % (prefix, instance)
    table = {"i": instance, "I": instance, "n": full, "N": full[: -len(".service")], "p": prefix, "%": "%"}
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "%" and i + 1 < len(value) and value[i + 1] in table:
            out.append(table[value[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_env_words(argv: list[str], env: dict[str, str]) -> list[str]:
    """ExecStart's variables, as systemd.service(5) "Command lines" expands them: a word that is
    exactly ``$NAME`` becomes the variable's value split at whitespace (no word when it is empty or
    unset); ``${NAME}`` anywhere in a word becomes its value, the word staying one word."""
    out: list[str] = []
    for word in argv:
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):
            out += env.get(word[1:], "").split()
            continue
        out.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word))
    return out


def parse_env_assignments(text: str) -> dict[str, str]:
    """Environment= value: space-separated, optionally quoted KEY=VALUE words."""
    env = {}
    for word in shlex.split(text):
        if "=" in word:
            k, v = word.split("=", 1)
            env[k] = v
    return env


def parse_env_file(path: Path) -> dict[str, str]:
    env = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        k, v = line.split("=", 1)
        k, v = k.strip(), v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
            v = v[1:-1]
        env[k] = v
    return env


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read(4000).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(2000).decode(errors="replace")
    except Exception as exc:
        return 0, "%s: %s" % (type(exc).__name__, exc)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True, type=Path)
    ap.add_argument("--instance", required=True)
    ap.add_argument("--log", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--wait-port-env", default="SGLANG_PORT")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--stop-timeout", type=float, default=20)
    ap.add_argument("--keep-running", action="store_true",
                    help="leave the server running once it answers (the caller stops its process group, pid)")
    ap.add_argument("--ready", nargs=argparse.REMAINDER, default=None,
                    help="last: the argv of a readiness command (the module dflash.deploy.instance_ready, its "
                         "file run as a program with its arguments file) that decides instead of this script's "
                         "own polling: ready when it exits 0; the last line it prints (JSON) is recorded")
    ap.add_argument("--extra-file", action="append", default=[],
                    help="a file the process writes (e.g. the kernel hook's JSON), read into the result")
    opts = ap.parse_args()

    unit_name = opts.unit.name
    prefix = unit_name.split("@", 1)[0]
    inst_unit = "%s@%s.service" % (prefix, opts.instance)
    files = [opts.unit]
    for d in (opts.unit.parent / (unit_name + ".d"), opts.unit.parent / (inst_unit + ".d")):
        if d.is_dir():
            files += sorted(d.glob("*.conf"))
    svc = parse_unit(files)
    res: dict = {"unit_files": [str(f) for f in files], "instance": opts.instance,
                 "not_applied": sorted(k for k in svc if k not in APPLIED)}

    def last(key, default=None):
        vals = svc.get(key) or []
        return expand(vals[-1], unit_name, opts.instance) if vals else default

    user = last("User", "root")
    group = last("Group")
    pw = pwd.getpwnam(user)
    gid = grp.getgrnam(group).gr_gid if group else pw.pw_gid
    env = {"PATH": SYSTEMD_PATH, "HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name,
           "SHELL": pw.pw_shell}
    for val in svc.get("Environment", []):
        env.update(parse_env_assignments(expand(val, unit_name, opts.instance)))
    for val in svc.get("EnvironmentFile", []):
        path = expand(val, unit_name, opts.instance)
        optional = path.startswith("-")
        path = path.lstrip("-")
        if os.path.exists(path):
            env.update(parse_env_file(Path(path)))
        elif not optional:
            res["error"] = "EnvironmentFile %s is missing (systemd would refuse to start)" % path
    wd = last("WorkingDirectory")
    if wd:
        wd = wd.lstrip("-")
        if wd == "~":
            wd = pw.pw_dir
    umask = int(last("UMask", "0022"), 8)
    exec_lines = svc.get("ExecStart") or []
    if len(exec_lines) != 1:
        res["error"] = "ExecStart: expected one line, found %d" % len(exec_lines)
        opts.out.write_text(json.dumps(res, indent=1))
        return 2
    cmdline = expand(exec_lines[0], unit_name, opts.instance).lstrip("@-:+!")
    argv = expand_env_words(shlex.split(cmdline), env)
    groups = sorted({g.gr_gid for g in grp.getgrall() if pw.pw_name in g.gr_mem} | {gid})
    res.update({"user": user, "uid": pw.pw_uid, "group": group, "gid": gid, "groups": groups,
                "working_directory": wd, "umask": oct(umask), "argv": argv,
                "environment": {k: ("<set>" if "KEY" in k and v else v) for k, v in sorted(env.items())}})
    if res.get("error"):
        opts.out.write_text(json.dumps(res, indent=1))
        return 2
    opts.log.parent.mkdir(parents=True, exist_ok=True)
    logf = open(opts.log, "wb")
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=wd or "/", user=pw.pw_uid, group=gid, extra_groups=groups,
                            umask=umask, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                            start_new_session=True, close_fds=True)
    res["pid"] = proc.pid
    port = env.get(opts.wait_port_env)
    res["port"] = port
    answers: dict = {}
    if opts.ready:
        # the role's own readiness decides; it knows nothing of the process, so it is stopped
        # when the server exits first
        ready = subprocess.Popen(opts.ready, stdout=subprocess.PIPE, text=True)
        while ready.poll() is None and proc.poll() is None:
            time.sleep(0.5)
        if ready.poll() is None:
            ready.kill()
        out = ready.communicate()[0]
        try:
            verdict = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            verdict = {"stdout": out[-2000:]}
        answers["ready"] = {"rc": ready.returncode, "result": verdict, "after_s": round(time.monotonic() - start, 2)}
        if ready.returncode == 0:
            answers["health_generate"] = {"status": 200, "after_s": answers["ready"]["after_s"],
                                          "by": "readiness command"}
            answers["v1_models"] = {"status": 200, "models": verdict.get("models")}
    elif port:
        base = "http://127.0.0.1:%s" % port
        deadline = start + opts.timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            code, body = get(base + "/health_generate")
            if code == 200:
                answers["health_generate"] = {"status": code, "body": body[:500],
                                              "after_s": round(time.monotonic() - start, 2)}
                code, body = get(base + "/v1/models")
                answers["v1_models"] = {"status": code, "body": body[:1000]}
                code, body = get(base + "/health")
                answers["health"] = {"status": code, "body": body[:300]}
                break
            answers["last_health_generate"] = {"status": code, "body": body[:300]}
            time.sleep(1)
    res["answers"] = answers
    res["exited_early"] = proc.poll()
    for extra in opts.extra_file:
        try:
            res.setdefault("extra", {})[extra] = json.loads(Path(extra).read_text())
        except (OSError, ValueError) as exc:
            res.setdefault("extra", {})[extra] = {"error": str(exc)}
    # KillMode=mixed: SIGTERM to the main process, SIGKILL to what is left of the group
    running = proc.poll() is None
    if running and opts.keep_running and answers.get("health_generate", {}).get("status") == 200:
        res["left_running"] = True
    elif running:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(opts.stop_timeout)
        except subprocess.TimeoutExpired:
            pass
    if not res.get("left_running"):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    res["returncode"] = proc.returncode
    res["ran_s"] = round(time.monotonic() - start, 2)
    logf.close()
    time.sleep(0.2)
    res["log_tail"] = opts.log.read_text(errors="replace")[-4000:]
    ok = bool(answers.get("health_generate", {}).get("status") == 200
              and answers.get("v1_models", {}).get("status") == 200)
    res["ok"] = ok
    opts.out.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res.get(k) for k in ("ok", "user", "working_directory", "argv", "answers", "returncode",
                                              "left_running")}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
