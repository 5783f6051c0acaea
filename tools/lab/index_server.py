#!/usr/bin/env python3
"""The lab's package index: a static HTTP server over build/fixtures on the lab gateway.

    python tools/lab/index_server.py --bind 10.89.64.1 --port 8631 --directory build/fixtures \
        --delay-file build/lab/index-delay --only-from-file build/lab/index-only-from

Fault injection for tests: while the delay file holds a number of seconds, every wheel
download (a path ending in .whl) waits that long before it is answered, which turns a venv
build into a window long enough to stop a host in the middle of it. While the only-from file
lists addresses (one per line), a client at any other address is answered 403: the index is then
reachable only through the lab's proxy (tools/lab/proxy_server.py, on the gateway), as an
operator's is behind a proxy. Standard library only.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import time
from pathlib import Path


class Handler(http.server.SimpleHTTPRequestHandler):
    delay_file: Path | None = None
    only_from_file: Path | None = None

    def do_GET(self):
        allowed = self._only_from()
        if allowed and self.client_address[0] not in allowed:
            self.send_error(403, f"direct access from {self.client_address[0]} refused: use the proxy")
            return
        if self.path.split("?", 1)[0].endswith(".whl"):
            time.sleep(self._delay())
        super().do_GET()

    def do_HEAD(self):
        allowed = self._only_from()
        if allowed and self.client_address[0] not in allowed:
            self.send_error(403)
            return
        super().do_HEAD()

    def _only_from(self) -> set:
        try:
            return set(self.only_from_file.read_text().split()) if self.only_from_file else set()
        except OSError:
            return set()

    def _delay(self) -> float:
        try:
            return max(0.0, float(self.delay_file.read_text().strip())) if self.delay_file else 0.0
        except (OSError, ValueError):
            return 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bind", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--directory", required=True)
    p.add_argument("--delay-file", type=Path)
    p.add_argument("--only-from-file", type=Path)
    args = p.parse_args()
    Handler.delay_file = args.delay_file
    Handler.only_from_file = args.only_from_file
    handler = functools.partial(Handler, directory=args.directory)
    server = http.server.ThreadingHTTPServer((args.bind, args.port), handler)
    print(f"serving {args.directory} on {args.bind}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
