#!/usr/bin/env python3
"""Steady streaming load through a router, counted: the `router` scenario's client (standard library only).

    python3 load_client.py --url http://127.0.0.1:30100 --out /root/router-load.json \
        --stop-file /root/router-load.stop [--concurrency 4] [--max-new-tokens 30]

Each of --concurrency threads sends one streaming ``POST /generate`` after another until the stop file
exists, then the client waits for the requests in flight and writes the summary (JSON, also every
second while it runs). Each request ends as one of:

  ok       200, the event stream read to its ``data: [DONE]``
  cut      200, the stream began, and it ended (closed, reset, a broken chunk, a timeout) before [DONE]
  refused  an HTTP answer other than 200 (the router with no worker answers 503), counted by status
  failed   no HTTP answer at all (the router not reachable, the connection reset before a status line)

A request refused or failed is followed by a 0.05 s pause, so a router with no worker is asked about
20 times a second per thread, not in a busy loop.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import threading
import time
from urllib.parse import urlsplit


def one_request(host: str, port: int, body: bytes, timeout: float) -> tuple[str, str]:
    """(outcome, detail) of one streaming /generate."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        try:
            conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            return "failed", f"{type(e).__name__}: {e}"
        if resp.status != 200:
            try:
                resp.read()
            except (OSError, http.client.HTTPException):
                pass
            return "refused", str(resp.status)
        events = 0
        try:
            while True:
                line = resp.readline()
                if not line:
                    return "cut", f"stream closed after {events} events without [DONE]"
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                if line[5:].strip() == b"[DONE]":
                    return "ok", str(events)
                events += 1
        except (OSError, http.client.HTTPException) as e:
            return "cut", f"after {events} events: {type(e).__name__}: {e}"
    finally:
        conn.close()


class Counter:
    def __init__(self, url: str, out: str):
        self.url, self.out = url, out
        self.lock = threading.Lock()
        self.counts = {"ok": 0, "cut": 0, "refused": 0, "failed": 0}
        self.refused_by_status: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {"cut": [], "refused": [], "failed": []}
        self.windows: dict[str, list[float]] = {}  # outcome -> [first, last] seconds since start
        self.started = time.time()
        self.last_ok_at = None

    def add(self, outcome: str, detail: str, t_start: float, t_end: float) -> None:
        with self.lock:
            self.counts[outcome] += 1
            if outcome == "refused":
                self.refused_by_status[detail] = self.refused_by_status.get(detail, 0) + 1
            if outcome == "ok":
                self.last_ok_at = t_end
            elif len(self.examples[outcome]) < 5:
                self.examples[outcome].append(f"t={t_start - self.started:.2f}s {detail}")
            w = self.windows.setdefault(outcome, [t_start - self.started, t_end - self.started])
            w[1] = t_end - self.started

    def write(self, done: bool) -> None:
        with self.lock:
            summary = {
                "url": self.url,
                "done": done,
                "started_at": self.started,
                "seconds": round(time.time() - self.started, 2),
                "requests": sum(self.counts.values()),
                **self.counts,
                "refused_by_status": dict(self.refused_by_status),
                "examples": self.examples,
                "windows": {k: [round(v[0], 2), round(v[1], 2)] for k, v in self.windows.items()},
                "last_ok_at": self.last_ok_at,
            }
        tmp = self.out + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(summary, fh, indent=1, sort_keys=True)
        os.replace(tmp, self.out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    parts = urlsplit(args.url)
    body = json.dumps({"text": "a steady question", "sampling_params": {"max_new_tokens": args.max_new_tokens},
                       "stream": True}).encode()
    counter = Counter(args.url, args.out)

    def loop() -> None:
        while not os.path.exists(args.stop_file):
            t0 = time.time()
            outcome, detail = one_request(parts.hostname, parts.port or 80, body, args.timeout)
            counter.add(outcome, detail, t0, time.time())
            if outcome in ("refused", "failed"):
                time.sleep(0.05)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        counter.write(done=False)
        for t in threads:
            t.join(timeout=1 / len(threads))
    counter.write(done=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
