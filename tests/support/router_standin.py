"""A stand-in for the SGLang router's worker API on 127.0.0.1, in the test process, answering as
sglang-router 0.3.2 answers (docs/architecture.md, "Router"): ``GET /workers`` the registered workers;
``POST /workers`` 202 with a new ``worker_id``, the worker registered ``delay`` seconds later in the
background; ``DELETE /workers/{id}`` 202 (404 ``WORKER_NOT_FOUND`` for an unknown id), the worker gone
``delay`` seconds later; ``GET /workers/{id}`` the worker or its queued job (``job_status``). With ``key`` set
(as ``--control-plane-api-keys`` does), every request without ``Authorization: Bearer <key>`` is answered 401
``Missing or invalid Authorization header`` (text, as the real router answers) and changes nothing."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import uuid


class Router:
    """The stand-in's state and switches: ``refuse`` (URLs whose addition fails, as one whose server
    answers neither HTTP nor gRPC), ``hang`` (URLs whose addition stays ``processing``), ``status`` (a
    status every request gets instead), ``unhealthy`` (URLs listed with ``is_healthy: false``)."""

    def __init__(self, delay=0.05):
        self.delay = delay
        self.workers = {}  # id -> url, in registration order
        self.jobs = {}  # id -> (url, status, message)
        self.refuse, self.hang, self.unhealthy = set(), set(), set()
        self.status = None
        self.key = None
        self.requests = []
        self.refused = []  # (method, path) answered 401 for want of the key
        self.lock = threading.Lock()

    def register(self, url):
        wid = str(uuid.uuid4())
        with self.lock:
            self.workers[wid] = url
        return wid

    def urls(self):
        with self.lock:
            return list(self.workers.values())

    def _later(self, fn):
        timer = threading.Timer(self.delay, fn)
        timer.daemon = True
        timer.start()

    def listing(self, wid, url):
        return {"id": wid, "url": url, "model_id": "qwen3-8b", "priority": 50, "cost": 1.0,
                "worker_type": "regular", "is_healthy": url not in self.unhealthy, "load": 0,
                "connection_mode": "HTTP", "disable_health_check": False}

    def add(self, url):
        wid = str(uuid.uuid4())
        with self.lock:
            self.jobs[wid] = (url, "processing", None)

        def finish():
            with self.lock:
                if url in self.hang:
                    return
                if url in self.workers.values():
                    self.jobs[wid] = (url, "failed", "Workflow failed at step create_worker: Step failed: "
                                      "create_worker - Worker %s already exists" % url)
                elif url in self.refuse:
                    self.jobs[wid] = (url, "failed", "Workflow failed at step detect_connection_mode: Both "
                                      "HTTP and gRPC health checks failed for %s" % url)
                else:
                    self.workers[wid] = url
                    del self.jobs[wid]
        self._later(finish)
        return wid

    def remove(self, wid):
        with self.lock:
            if wid not in self.workers:
                return False

        def finish():
            with self.lock:
                self.workers.pop(wid, None)
        self._later(finish)
        return True


@contextlib.contextmanager
def router_standin(delay=0.05):
    """Yields ``(base URL, Router)``."""
    state = Router(delay)

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def routed(self, method):
            state.requests.append((method, self.path))
            if state.key is not None and self.headers.get("Authorization") != "Bearer " + state.key:
                state.refused.append((method, self.path))
                data = b"Missing or invalid Authorization header"
                self.send_response(401)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return True
            if state.status is not None:
                return self.answer(state.status, {"error": "stand-in answers %d" % state.status})
            return None

        def do_GET(self):
            if self.routed("GET") is not None:
                return
            if self.path == "/workers":
                with state.lock:
                    listed = [state.listing(w, u) for w, u in state.workers.items()]
                return self.answer(200, {"workers": listed, "total": len(listed), "stats": {
                    "prefill_count": 0, "decode_count": 0, "regular_count": len(listed)}})
            wid = self.path.rsplit("/", 1)[-1]
            with state.lock:
                if wid in state.workers:
                    return self.answer(200, state.listing(wid, state.workers[wid]))
                if wid in state.jobs:
                    url, status, message = state.jobs[wid]
                    return self.answer(200, {"id": wid, "url": url, "is_healthy": False, "job_status": {
                        "job_type": "AddWorker", "worker_url": url, "status": status, "message": message}})
            return self.answer(404, {"error": "Worker %s not found" % wid, "code": "WORKER_NOT_FOUND"})

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.routed("POST") is not None:
                return
            try:
                url = json.loads(body)["url"]
            except (ValueError, KeyError, TypeError):
                return self.answer(422, {"error": "missing field `url`"})
            wid = state.add(url)
            return self.answer(202, {"status": "accepted", "worker_id": wid, "url": url,
                                     "location": "/workers/" + wid,
                                     "message": "Worker addition queued for background processing"})

        def do_DELETE(self):
            if self.routed("DELETE") is not None:
                return
            wid = self.path.rsplit("/", 1)[-1]
            if not state.remove(wid):
                return self.answer(404, {"error": "Worker %s not found" % wid, "code": "WORKER_NOT_FOUND"})
            return self.answer(202, {"status": "accepted", "worker_id": wid,
                                     "message": "Worker removal queued for background processing"})

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d" % server.server_port, state
    finally:
        server.shutdown()
        server.server_close()
