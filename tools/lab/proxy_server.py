#!/usr/bin/env python3
"""A forward HTTP proxy on the lab's gateway, for the proxy test (tests/lab/test_proxy.py).

    python tools/lab/proxy_server.py --bind 10.89.64.1 --port 8632 --log build/lab/proxy.log \
        --allow 10.89.64.1:8631

It forwards plain-HTTP requests written with an absolute URI (the scheme, host and port before the path, as a client
configured with ``http_proxy`` sends them) to the addresses ``--allow`` names, and refuses any other
destination (403) and ``CONNECT``: the lab has no route out, and the proxy must not become one. Each
request is logged as one line, ``<client> <method> <url> <status>``, so a test can tell what went
through it. With ``--auth user:password`` it asks for them (407 without ``Proxy-Authorization: Basic``,
as a company proxy does). Standard library only.
"""
from __future__ import annotations

import argparse
import base64
import http.client
import http.server
import threading
import urllib.parse
from pathlib import Path

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "proxy-connection"}


class Proxy(http.server.BaseHTTPRequestHandler):
    allow: set = set()
    auth: str = ""
    log_path: Path | None = None
    lock = threading.Lock()

    def _log(self, status: int) -> None:
        if self.log_path:
            with self.lock, self.log_path.open("a", encoding="utf-8") as f:
                f.write(f"{self.client_address[0]} {self.command} {self.path} {status}\n")

    def _forward(self, body: bool) -> None:
        if self.auth and self.headers.get("Proxy-Authorization", "") != \
                "Basic " + base64.b64encode(self.auth.encode()).decode():
            self._log(407)
            self.send_response(407)
            self.send_header("Proxy-Authenticate", 'Basic realm="lab"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        url = urllib.parse.urlsplit(self.path)
        target = f"{url.hostname}:{url.port or 80}"
        if url.scheme != "http" or target not in self.allow:
            self._log(403)
            self.send_error(403, f"the lab proxy forwards to {sorted(self.allow)} only")
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
        try:
            conn.request(self.command, urllib.parse.urlunsplit(("", "", url.path or "/", url.query, "")),
                         headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as exc:
            self._log(502)
            self.send_error(502, str(exc))
            return
        finally:
            conn.close()
        self._log(resp.status)
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server's names)
        self._forward(body=True)

    def do_HEAD(self):  # noqa: N802
        self._forward(body=False)

    def do_CONNECT(self):  # noqa: N802
        self._log(403)
        self.send_error(403, "CONNECT is not forwarded by the lab proxy")

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature): the request log is ours
        return


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bind", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--allow", action="append", required=True, help="host:port the proxy forwards to")
    p.add_argument("--log", type=Path)
    p.add_argument("--auth", default="", help="user:password the proxy asks for")
    args = p.parse_args()
    Proxy.allow = set(args.allow)
    Proxy.auth = args.auth
    Proxy.log_path = args.log
    server = http.server.ThreadingHTTPServer((args.bind, args.port), Proxy)
    print(f"proxy on {args.bind}:{args.port} for {sorted(Proxy.allow)}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
