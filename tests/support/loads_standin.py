"""A stand-in for one SGLang instance's ``GET /v1/loads`` on 127.0.0.1, in the test process, answering in
SGLang's shape (``{"loads": [...], "aggregate": {"total_running_reqs", "total_waiting_reqs", ...}}``;
the fixture server's answer, tests/fixtures/python/sglang/srt/entrypoints/http_server.py). Its switches:
``running`` and ``waiting`` (the counts it reports; ``running`` may be a list, one value a request, the
last one kept), ``status`` (a status every request gets instead, 404 for a server without the
endpoint), ``key`` (the API key it requires, as SGLang with --api-key does), ``on_request`` (called before
each answer: a test's look at the moment the instance is asked)."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading


class Worker:
    def __init__(self):
        self.running = 0
        self.waiting = 0
        self.status = None
        self.key = ""
        self.requests = []  # (path, Authorization header)
        self.on_request = None  # called with no argument before each answer
        self.lock = threading.Lock()

    def count(self):
        with self.lock:
            if isinstance(self.running, list):
                return self.running.pop(0) if len(self.running) > 1 else self.running[0]
            return self.running


@contextlib.contextmanager
def loads_standin():
    """Yields ``(base URL, Worker)``."""
    state = Worker()

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            state.requests.append((self.path, self.headers.get("Authorization")))
            if state.on_request is not None:
                state.on_request()
            if state.status is not None:
                return self.answer(state.status, {"detail": "stand-in answers %d" % state.status})
            if state.key and self.headers.get("Authorization") != "Bearer " + state.key:
                return self.answer(401, {"error": "Unauthorized"})
            if self.path != "/v1/loads":
                return self.answer(404, {"detail": "Not Found"})
            running = state.count()
            return self.answer(200, {
                "timestamp": "2026-12-02T19:00:00", "version": "0.5.11", "dp_rank_count": 1,
                "loads": [{"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": state.waiting}],
                "aggregate": {"total_running_reqs": running, "total_waiting_reqs": state.waiting,
                              "total_reqs": running + state.waiting}})

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d" % server.server_port, state
    finally:
        server.shutdown()
        server.server_close()
