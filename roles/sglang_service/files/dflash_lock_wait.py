# Wait until this run holds the host lock: the lock's holder file names this
# run's token. Gives up after the timeout, measured on the monotonic clock (a
# wall-clock step on the host neither stretches nor cuts the wait).
# Standard library only.
# usage: python3 dflash_lock_wait.py '<json>'
# request: {"owner": "/run/dflash-deploy.owner", "token": str, "timeout": s, "interval": s}
# Prints one JSON object {"held": bool, "seconds": s, "holder": text};
# exit 0 when held, 1 when not.
import json
import sys
import time


def holder(path):
    """The holder file's text ('' while there is none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def holds(text, token):
    """Does the holder text name this token (its first word)?"""
    return text.split(" ", 1)[0] == token and bool(token)


def wait(owner, token, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    start = clock()
    while True:
        text = holder(owner)
        if holds(text, token):
            return {"held": True, "seconds": round(clock() - start, 1), "holder": text}
        if clock() - start >= timeout:
            return {"held": False, "seconds": round(clock() - start, 1), "holder": text}
        sleep(interval)


def main():
    req = json.loads(sys.argv[1])
    result = wait(req["owner"], req["token"], float(req["timeout"]), float(req.get("interval", 0.5)))
    print(json.dumps(result, sort_keys=True))
    sys.exit(0 if result["held"] else 1)


if __name__ == "__main__":
    main()
