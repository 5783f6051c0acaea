# Wait until an SGLang instance is ready: /health_generate answers 200 and
# /v1/models names the served model. Gives up early when the unit has
# restarted more than max_restarts times since the wait began (a crash loop
# under Restart=on-failure), or has failed. Standard library only.
# usage: python3 dflash_ready.py '<json>'
# request: {"base": "http://127.0.0.1:30001", "model": str, "unit": str,
#           "timeout": s, "interval": s (the longest wait between two probes;
#           the waits start at 0.5 s and double up to it), "max_restarts": n,
#           "env_file": "/etc/dflash/<instance>.env"}
# The API key is read here, on the host, from the instance's env file (0640
# root:sglang; SGLANG_API_KEY), never from the command line or the task's
# environment, which Ansible prints at -vvv and every local user sees in ps.
# Prints one JSON object; exit 0 when ready, 1 when not.
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request


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


def api_key(env_file):
    """SGLANG_API_KEY from the instance's env file ('' when the file or the key is absent)."""
    if not env_file:
        return ""
    try:
        with open(env_file, encoding="utf-8") as handle:
            return parse_env_file(handle.read()).get("SGLANG_API_KEY", "")
    except OSError:
        return ""


def unit_state(unit):
    try:
        argv = ["systemctl", "show", "-p", "NRestarts", "-p", "ActiveState", "-p", "MainPID", "-p", "SubState", unit]
        out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False).stdout
    except OSError:
        return {}
    state = {}
    for line in out.splitlines():
        key, _sep, value = line.partition("=")
        state[key] = value
    return state


def get(url, key, timeout):
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (urllib.error.URLError, OSError) as exc:
        return None, str(getattr(exc, "reason", exc))


FIRST_WAIT = 0.5


def waits(interval):
    """The pauses between probes: 0.5 s, doubling up to ``interval`` and then ``interval``
    for good. A server that is ready a second after its restart is seen then, not a whole
    interval later; a long model load is still probed only every ``interval`` seconds."""
    longest = max(float(interval), 0.0)
    wait = min(FIRST_WAIT, longest)
    while True:
        yield wait
        wait = min(wait * 2, longest)


def main():
    req = json.loads(sys.argv[1])
    key = api_key(req.get("env_file"))
    start = time.monotonic()
    first = unit_state(req["unit"])
    restarts0 = int(first.get("NRestarts", "0") or 0)
    result = {"ready": False, "health": None, "models": [], "restarts": 0, "reason": None}
    pauses = waits(req["interval"])
    while True:
        state = unit_state(req["unit"])
        # auto-restart: it exited and waits RestartSec to start again.
        result["restarts"] = (int(state.get("NRestarts", "0") or 0) - restarts0
                              + (1 if state.get("SubState") == "auto-restart" else 0))
        if result["restarts"] > int(req.get("max_restarts", 0)):
            result["reason"] = "the unit restarted %d times while starting (crash loop)" % result["restarts"]
            break
        if state.get("ActiveState") == "failed":
            result["reason"] = "the unit failed"
            break
        status, body = get(req["base"] + "/health_generate", key, 30)
        result["health"] = status
        if status == 200:
            status, body = get(req["base"] + "/v1/models", key, 30)
            try:
                result["models"] = [m.get("id") for m in json.loads(body).get("data", [])]
            except (ValueError, AttributeError):
                result["models"] = []
            if req["model"] in result["models"]:
                result["ready"] = True
                break
            result["reason"] = "/v1/models answers %s, not naming %s" % (result["models"], req["model"])
        else:
            result["reason"] = "/health_generate answered %s" % (status if status is not None else "nothing: " + body)
        if time.monotonic() - start >= float(req["timeout"]):
            result["reason"] = "not ready within %ss: %s" % (req["timeout"], result["reason"])
            break
        time.sleep(next(pauses))
    result["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(result, sort_keys=True))
    sys.exit(0 if result["ready"] else 1)


if __name__ == "__main__":
    main()
