# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether one SGLang instance is ready: ``/health_generate`` answers 200 and ``/v1/models``
names the served model, within a timeout.

The wait gives up early when the unit has restarted more than ``max_restarts`` times since it
began (a crash loop under ``Restart=on-failure``), or has failed. Probes start quick and slow
down (``waits``): 0.5 s, doubling up to the interval.

The API key is read on the host from the instance's env file (0640 root:sglang;
``SGLANG_API_KEY``), parsed as systemd parses an ``EnvironmentFile=`` (``parse_env_file``),
never taken from an option or the environment, which Ansible prints at -vvv and every local
user sees in the process list.

The decisions are pure functions (``parse_env_file``, ``waits``, ``parse_unit_state``,
``unit_verdict``, ``parse_models``, ``http_verdict``, ``timed_out``); the I/O sits at the
edge (``api_key``, ``unit_state``, ``get``) and ``wait_ready`` runs the loop, with the I/O,
clock and sleep replaceable for tests. Each probe has an overall deadline and a size bound
(``bounded_http``). The standard library only.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular
from ansible_collections.dflash.deploy.plugins.module_utils.host.bounded_http import HttpError, fetch, scheme_error
from ansible_collections.dflash.deploy.plugins.module_utils.host.programs import find_program
from ansible_collections.dflash.deploy.plugins.module_utils.host.runner import run_with_timeout

FIRST_WAIT = 0.5
PROBE_TIMEOUT = 30  # seconds one HTTP request may take in all (/health_generate generates a token)
MIN_PROBE = 1.0  # seconds a probe may take at least, even when the wait's time is spent
MAX_ENV_FILE_BYTES = 1 << 20
MAX_ANSWER_BYTES = 1 << 20  # /health_generate and /v1/models answer a few hundred bytes
UNIT_PROPERTIES = ("NRestarts", "ActiveState", "MainPID", "SubState")
SYSTEMCTL_TIMEOUT = 30  # seconds `systemctl show` may take (a busy systemd answers late, a hung one never)


@dataclass(frozen=True)
class Readiness:
    """The answer: ``ready``, or why not (``reason``), with what the last probes saw."""

    ready: bool
    health: int | None = None  # the last /health_generate status; None: no answer, or never asked
    models: tuple = field(default_factory=tuple)  # what /v1/models named, the last time it was asked
    restarts: int = 0  # restarts of the unit since the wait began
    reason: str | None = None  # why not ready (the last probe's answer while waiting)
    seconds: float = 0.0

    def as_dict(self):
        return {"ready": self.ready, "health": self.health, "models": list(self.models),
                "restarts": self.restarts, "reason": self.reason, "seconds": self.seconds}


# -- pure decisions ------------------------------------------------------------------------------

def parse_env_file(text):
    """The variables of a systemd EnvironmentFile, as systemd reads them (systemd.exec(5),
    "EnvironmentFile="): lines starting with # or ; are comments; a key is the text before
    "=", leading and trailing whitespace dropped; an unquoted value keeps interior
    whitespace, drops leading and trailing whitespace, and takes a backslash as "keep the
    next character" (backslash-newline continues the line); a '-quoted value is verbatim
    up to the next '; a "-quoted value takes a backslash before one of " \\ ` $ as that
    character, backslash-newline as a continuation, and keeps any other backslash; quoted
    parts and unquoted text next to each other join; a line without "=" is ignored."""
    env = {}
    key, value, state = "", "", "pre_key"
    trailing = 0  # whitespace at the end of an unquoted value, dropped when it ends
    for c in text + "\n":
        if state == "pre_key":
            if c in "#;":
                state = "comment"
            elif not c.isspace():
                key, state = c, "key"
        elif state == "key":
            if c == "\n":
                key, state = "", "pre_key"
            elif c == "=":
                key, value, trailing, state = key.strip(), "", 0, "pre_value"
            else:
                key += c
        elif state == "comment":
            if c == "\\":
                state = "comment_escape"
            elif c == "\n":
                state = "pre_key"
        elif state == "comment_escape":
            state = "comment"
        elif state in ("pre_value", "value"):
            if c == "\n":
                env[key] = value[:len(value) - trailing] if state == "value" else value
                key, state = "", "pre_key"
            elif c == "'" and state == "pre_value":
                state = "single"
            elif c == '"' and state == "pre_value":
                state = "double"
            elif c == "\\":
                state, trailing = "value_escape", 0
            elif c in " \t\r":
                if state == "value":
                    value, trailing = value + c, trailing + 1
            else:
                value, trailing, state = value + c, 0, "value"
        elif state == "value_escape":
            if c != "\n":
                value += c
            state = "value"
        elif state == "single":
            if c == "'":
                state = "pre_value"
            else:
                value += c
        elif state == "double":
            if c == '"':
                state = "pre_value"
            elif c == "\\":
                state = "double_escape"
            else:
                value += c
        elif state == "double_escape":
            if c in '"\\`$':
                value += c
            elif c != "\n":
                value += "\\" + c
            state = "double"
    return env


def waits(interval):
    """The pauses between probes: 0.5 s, doubling up to ``interval`` and then ``interval``
    for good. A server that is ready a second after its restart is seen then, not a whole
    interval later; a long model load is still probed only every ``interval`` seconds."""
    longest = max(float(interval), 0.0)
    wait = min(FIRST_WAIT, longest)
    while True:
        yield wait
        wait = min(wait * 2, longest)


def parse_unit_state(text):
    """``systemctl show -p ...`` output as a dict (``Key=value`` lines)."""
    state = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            state[key] = value
    return state


def restart_count(state):
    """NRestarts of a ``parse_unit_state`` dict; 0 when absent or not a number."""
    text = state.get("NRestarts", "") or "0"
    return int(text) if text.isdigit() else 0


def unit_verdict(state, restarts_before, max_restarts):
    """(restarts since the wait began, why the wait ends now or None). A unit waiting
    RestartSec to start again (SubState auto-restart) counts as one more restart."""
    restarts = restart_count(state) - restarts_before + (1 if state.get("SubState") == "auto-restart" else 0)
    if restarts > max_restarts:
        return restarts, "the unit restarted %d times while starting (crash loop)" % restarts
    if state.get("ActiveState") == "failed":
        return restarts, "the unit failed"
    return restarts, None


def parse_models(body):
    """The ids /v1/models names (``{"data": [{"id": ...}, ...]}``); () for anything else."""
    try:
        return tuple(m.get("id") for m in json.loads(body).get("data", []))
    except (ValueError, AttributeError, TypeError):
        return ()


def health_reason(status, body):
    """Why /health_generate does not count as healthy (status None: no answer, ``body`` says why)."""
    return "/health_generate answered %s" % (status if status is not None else "nothing: " + body)


def models_reason(model, models):
    """None when ``models`` names ``model``, else why the instance is not ready."""
    if model in models:
        return None
    return "/v1/models answers %s, not naming %s" % (list(models), model)


def seconds_text(seconds):
    """``10`` for 10.0, ``2.5`` for 2.5: a timeout as the operator wrote it."""
    seconds = float(seconds)
    return "%d" % seconds if seconds.is_integer() else "%s" % seconds


def probe_seconds(timeout, elapsed):
    """How long the next probe may take in all: the time left, at least MIN_PROBE, at most PROBE_TIMEOUT."""
    return min(PROBE_TIMEOUT, max(float(timeout) - elapsed, MIN_PROBE))


def timed_out(timeout, reason):
    return "not ready within %ss: %s" % (seconds_text(timeout), reason)


# -- I/O at the edge -----------------------------------------------------------------------------

def api_key(env_file):
    """SGLANG_API_KEY from the instance's env file ('' when the file or the key is absent)."""
    if not env_file:
        return ""
    try:
        data = read_regular(env_file, MAX_ENV_FILE_BYTES)
    except OSError:
        return ""
    return parse_env_file(data.decode("utf-8", "replace")).get("SGLANG_API_KEY", "")


def unit_state(unit):
    """The unit's restart count and states from ``systemctl show``; {} without systemctl, or when it
    gives no answer in SYSTEMCTL_TIMEOUT seconds. systemctl by absolute path (programs.py), never by name."""
    systemctl = find_program("systemctl")
    if not systemctl:
        return {}
    argv = [systemctl, "show"]
    for prop in UNIT_PROPERTIES:
        argv += ["-p", prop]
    rc, out, _err, timed_out = run_with_timeout(argv + [unit], SYSTEMCTL_TIMEOUT)
    if rc is None or timed_out:
        return {}
    return parse_unit_state(out)


def get(url, key, timeout=PROBE_TIMEOUT, limit=MAX_ANSWER_BYTES):
    """(status, body) of a GET; status None when no complete answer came, the body then says why. The
    whole exchange takes at most ``timeout`` seconds and reads at most ``limit`` bytes (bounded_http: a
    server dripping its answer fails the probe at the deadline). Only http(s); straight to the instance:
    no proxy from the environment, no credentials from ~/.netrc."""
    headers = {"Authorization": "Bearer " + key} if key else {}
    try:
        status, body = fetch(url, headers=headers, timeout=timeout, limit=limit, agent="dflash-instance-ready")
    except HttpError as exc:
        return None, exc.reason
    return status, body.decode("utf-8", "replace")


def base_error(base):
    """None when ``base`` is an http:// or https:// URL, else why it is refused (one line, m3: a
    ``file://`` base read a file as root and returned it in the reason)."""
    error = scheme_error(base)
    return "base %s" % error if error else None


def wait_ready(base, model, unit, timeout, interval, max_restarts=0, env_file=None,
               probe=get, read_unit=unit_state, clock=time.monotonic, sleep=time.sleep):
    """Probe until the instance at ``base`` serves ``model``, the unit crash-loops or fails,
    or ``timeout`` seconds pass; a ``Readiness``. Each probe (``probe(url, key, seconds)``) has the
    time left, at least MIN_PROBE and at most PROBE_TIMEOUT seconds, in all: the wait ends within
    ``timeout`` and two short probes, whatever the server does. A base that is not http(s) is refused."""
    if base_error(base):
        return Readiness(ready=False, reason=base_error(base))
    key = api_key(env_file)
    start = clock()
    restarts_before = restart_count(read_unit(unit))
    pauses = waits(interval)
    health, models, restarts, reason, ready = None, (), 0, None, False
    while True:
        restarts, stop = unit_verdict(read_unit(unit), restarts_before, max_restarts)
        if stop:
            reason = stop
            break
        health, body = probe(base + "/health_generate", key, probe_seconds(timeout, clock() - start))
        if health == 200:
            models = parse_models(probe(base + "/v1/models", key, probe_seconds(timeout, clock() - start))[1])
            reason = models_reason(model, models)
            if reason is None:
                ready = True
                break
        else:
            reason = health_reason(health, body)
        if clock() - start >= float(timeout):
            reason = timed_out(timeout, reason)
            break
        sleep(next(pauses))
    return Readiness(ready=ready, health=health, models=models, restarts=restarts, reason=reason,
                     seconds=round(clock() - start, 1))
