# Wait until an SGLang instance is ready: /health_generate answers 200 and
# /v1/models names the served model. Gives up early when the unit has
# restarted more than max_restarts times since the wait began (a crash loop
# under Restart=on-failure), or has failed. Standard library only.
# usage: python3 dflash_ready.py '<json>'  (api key in env DFLASH_API_KEY)
# request: {"base": "http://127.0.0.1:30001", "model": str, "unit": str,
#           "timeout": s, "interval": s, "max_restarts": n}
# Prints one JSON object; exit 0 when ready, 1 when not.
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request


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


def main():
    req = json.loads(sys.argv[1])
    key = os.environ.get("DFLASH_API_KEY", "")
    start = time.monotonic()
    first = unit_state(req["unit"])
    restarts0 = int(first.get("NRestarts", "0") or 0)
    result = {"ready": False, "health": None, "models": [], "restarts": 0, "reason": None}
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
        time.sleep(float(req["interval"]))
    result["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(result, sort_keys=True))
    sys.exit(0 if result["ready"] else 1)


if __name__ == "__main__":
    main()
