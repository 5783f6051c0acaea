"""An SGLang /generate stand-in on 127.0.0.1, in the test process, streaming SGLang's chunks
(``data: {json}`` events, ``meta_info.completion_tokens`` counting the tokens so far) at set delays;
for the performance probe's tests."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time


@contextlib.contextmanager
def sglang_stream(first=0.05, gap=0.02, steps=(1, 1, 1, 1), verify=True, key="", status=200, error=None,
                  seen=None):
    """A server on 127.0.0.1 whose POST /generate streams chunks of ``steps`` tokens: the first after
    ``first`` seconds, each later one ``gap`` seconds after the one before; the last carries
    spec_verify_ct (len(steps) - 1) when ``verify``. ``seen`` collects the request bodies."""
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if seen is not None:
                seen.append((self.path, body, self.headers.get("Authorization")))
            if key and self.headers.get("Authorization") != "Bearer " + key:
                return self.plain(401, {"error": "Unauthorized"})
            if status != 200:
                return self.plain(status, {"object": "error", "message": "scheduler is not responding"})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            if error:
                self.wfile.write(b'data: {"error": {"message": "%s"}}\n\n' % error.encode())
            done = 0
            for i, size in enumerate(steps):
                time.sleep(first if i == 0 else gap)
                done += size
                meta = {"completion_tokens": done}
                if verify and i == len(steps) - 1:
                    meta["spec_verify_ct"] = len(steps) - 1
                self.wfile.write(b"data: " + json.dumps({"text": "t" * done, "meta_info": meta}).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

        def plain(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
