# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A thin client of the SGLang router's worker API (sglang-router 0.3.2), standard library only.

``GET /workers`` lists the registered workers (200). ``POST /workers`` with ``{"url": ...}`` queues an
addition and answers 202 with ``worker_id``; ``DELETE /workers/{id}`` queues a removal and answers 202,
404 (``WORKER_NOT_FOUND``) for an id the router does not know. ``GET /workers/{id}`` answers the worker
and, for one queued, ``job_status`` (``{"status": "processing" | "failed", "message": ...}``); an
addition whose worker does not answer stays ``processing`` (the router retries it for its
``--worker-startup-timeout-secs``) and is not listed by ``GET /workers``. Requests go straight to the
router: no proxy from the environment; each has an overall deadline and a size bound (round 3, M1).
"""

from __future__ import annotations

import json
from urllib.parse import quote

from ansible_collections.dflash.deploy.plugins.module_utils.host.bounded_http import HttpError, fetch, scheme_error

MAX_ANSWER_BYTES = 8 << 20


class RouterError(Exception):
    """The router did not answer, or answered what the module cannot use; the message is one line."""


class RouterUnreachable(RouterError):
    """The router did not answer at all (refused, timed out, no route): nothing reaches it."""


def _one_line(text, limit=300):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def request(router, method, path, body=None, timeout=10.0):
    """``(status, parsed JSON or None, raw text)`` of one request to the router, within ``timeout`` seconds in
    all and MAX_ANSWER_BYTES (bounded_http: a router dripping its answer fails at the deadline). An HTTP error
    status is an answer; a router that does not answer, or not in time, raises RouterUnreachable; an
    address that is not http(s) raises RouterError."""
    error = scheme_error(router + path)
    if error:
        raise RouterError("router address %s" % error)
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    try:
        status, raw = fetch(router + path, method, headers, data, timeout=timeout, limit=MAX_ANSWER_BYTES,
                            agent="dflash-router-client")
    except HttpError as exc:
        raise RouterUnreachable("the router at %s does not answer %s %s: %s"
                                % (router, method, path, _one_line(exc.reason))) from None
    text = raw.decode("utf-8", "replace")
    try:
        parsed = json.loads(text) if text.strip() else None
    except ValueError:
        parsed = None
    return status, parsed, text


def _message(parsed, text):
    if isinstance(parsed, dict):
        for key in ("error", "message", "detail"):
            if parsed.get(key):
                return _one_line(parsed[key])
    return _one_line(text) or "(empty answer)"


def list_workers(router, timeout=10.0):
    """The ``GET /workers`` answer (a dict); RouterError when it is not 200 with JSON."""
    status, parsed, text = request(router, "GET", "/workers", timeout=timeout)
    if status != 200 or not isinstance(parsed, dict):
        raise RouterError("the router at %s answered %s to GET /workers: %s" % (router, status, _message(parsed, text)))
    return parsed


def add_worker(router, url, timeout=10.0):
    """Queue the addition of ``url``; the id the router gave it. RouterError naming the worker when the
    router refuses it."""
    status, parsed, text = request(router, "POST", "/workers", {"url": url}, timeout=timeout)
    if status not in (200, 201, 202) or not isinstance(parsed, dict) or not parsed.get("worker_id"):
        raise RouterError("the router at %s refused worker %s: %s %s" % (router, url, status, _message(parsed, text)))
    return str(parsed["worker_id"])


def remove_worker(router, worker_id, url, timeout=10.0):
    """Queue the removal of the worker ``worker_id`` (``url`` only names it in errors). True when queued,
    False when the router no longer knows it."""
    status, parsed, text = request(router, "DELETE", "/workers/" + quote(worker_id, safe=""),
                                   timeout=timeout)
    if status == 404:
        return False
    if status not in (200, 202, 204):
        raise RouterError("the router at %s refused to remove worker %s (%s): %s %s"
                          % (router, url, worker_id, status, _message(parsed, text)))
    return True


def job_status(router, worker_id, timeout=10.0):
    """``(status, message)`` of the router's job for ``worker_id`` (``GET /workers/{id}``'s
    ``job_status``); ``(None, None)`` when it has none or the router does not know the id."""
    status, parsed, _text = request(router, "GET", "/workers/" + quote(worker_id, safe=""), timeout=timeout)
    job = parsed.get("job_status") if status == 200 and isinstance(parsed, dict) else None
    if not isinstance(job, dict):
        return None, None
    return job.get("status"), job.get("message")
