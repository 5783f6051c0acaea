# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A thin client of the SGLang router's worker API (sglang-router 0.3.2), standard library only.

``GET /workers`` lists the registered workers (200). ``POST /workers`` with ``{"url": ...}`` queues an
addition and answers 202 with ``worker_id``; ``DELETE /workers/{id}`` queues a removal and answers 202,
404 (``WORKER_NOT_FOUND``) for an id the router does not know. ``GET /workers/{id}`` answers the worker
and, for one queued, ``job_status`` (``{"status": "processing" | "failed", "message": ...}``); an
addition whose worker does not answer stays ``processing`` (the router retries it for its
``--worker-startup-timeout-secs``) and is not listed by ``GET /workers``. Requests go straight to the
router: no proxy from the environment, no redirect followed; each has an overall deadline and a size
bound (round 3, M1).

A router started with ``--control-plane-api-keys`` (the managed router, from the key in its env file,
``SGLANG_ROUTER_CONTROL_PLANE_API_KEY``) answers every worker API call 401 without ``Authorization: Bearer
<key>``; ``Keyed(key)`` is this module's API with the key sent on each request, and ``control_plane_key`` reads
it on the host from that file. The key never appears in a message.
"""

from __future__ import annotations

import errno
import json
from urllib.parse import quote

from ansible_collections.dflash.deploy.plugins.module_utils.fileio import read_regular
from ansible_collections.dflash.deploy.plugins.module_utils.host.bounded_http import HttpError, fetch, scheme_error
from ansible_collections.dflash.deploy.plugins.module_utils.host.readiness import parse_env_file

MAX_ANSWER_BYTES = 8 << 20
MAX_KEY_FILE_BYTES = 64 << 10
KEY_VAR = "SGLANG_ROUTER_CONTROL_PLANE_API_KEY"


class RouterError(Exception):
    """The router did not answer, or answered what the module cannot use; the message is one line."""


class RouterUnreachable(RouterError):
    """The router did not answer at all (refused, timed out, no route): nothing reaches it."""


def _one_line(text, limit=300):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def control_plane_key(path):
    """The router's control-plane key from its env file on the host (``SGLANG_ROUTER_CONTROL_PLANE_API_KEY``);
    '' when ``path`` is empty or no such file exists (a router deployed before it had a key). RouterError naming
    the file, never its contents, when it cannot be read or holds no key."""
    if not path:
        return ""
    try:
        data = read_regular(path, MAX_KEY_FILE_BYTES, nofollow=True)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return ""
        raise RouterError("cannot read the router's key file %s: %s" % (path, exc.strerror or exc)) from None
    key = parse_env_file(data.decode("utf-8", "replace")).get(KEY_VAR, "")
    if not key:
        raise RouterError("the router's key file %s holds no %s" % (path, KEY_VAR))
    return key


def request(router, method, path, body=None, timeout=10.0, key=""):
    """``(status, parsed JSON or None, raw text)`` of one request to the router, within ``timeout`` seconds in
    all and MAX_ANSWER_BYTES (bounded_http: a router dripping its answer fails at the deadline). An HTTP error
    status is an answer; a router that does not answer, or not in time, raises RouterUnreachable; an
    address that is not http(s) raises RouterError. With ``key``, ``Authorization: Bearer <key>`` (the
    managed router's control plane)."""
    error = scheme_error(router + path)
    if error:
        raise RouterError("router address %s" % error)
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Accept": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
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


def list_workers(router, timeout=10.0, key=""):
    """The ``GET /workers`` answer (a dict); RouterError when it is not 200 with JSON."""
    status, parsed, text = request(router, "GET", "/workers", timeout=timeout, key=key)
    if status != 200 or not isinstance(parsed, dict):
        raise RouterError("the router at %s answered %s to GET /workers: %s" % (router, status, _message(parsed, text)))
    return parsed


def add_worker(router, url, timeout=10.0, key=""):
    """Queue the addition of ``url``; the id the router gave it. RouterError naming the worker when the
    router refuses it."""
    status, parsed, text = request(router, "POST", "/workers", {"url": url}, timeout=timeout, key=key)
    if status not in (200, 201, 202) or not isinstance(parsed, dict) or not parsed.get("worker_id"):
        raise RouterError("the router at %s refused worker %s: %s %s" % (router, url, status, _message(parsed, text)))
    return str(parsed["worker_id"])


def remove_worker(router, worker_id, url, timeout=10.0, key=""):
    """Queue the removal of the worker ``worker_id`` (``url`` only names it in errors). True when queued,
    False when the router no longer knows it."""
    status, parsed, text = request(router, "DELETE", "/workers/" + quote(worker_id, safe=""),
                                   timeout=timeout, key=key)
    if status == 404:
        return False
    if status not in (200, 202, 204):
        raise RouterError("the router at %s refused to remove worker %s (%s): %s %s"
                          % (router, url, worker_id, status, _message(parsed, text)))
    return True


def job_status(router, worker_id, timeout=10.0, key=""):
    """``(status, message)`` of the router's job for ``worker_id`` (``GET /workers/{id}``'s
    ``job_status``); ``(None, None)`` when it has none or the router does not know the id."""
    status, parsed, _text = request(router, "GET", "/workers/" + quote(worker_id, safe=""), timeout=timeout, key=key)
    job = parsed.get("job_status") if status == 200 and isinstance(parsed, dict) else None
    if not isinstance(job, dict):
        return None, None
    return job.get("status"), job.get("message")


class Keyed:
    """This module's worker API with the router's control-plane key sent on every request: what ``sync`` and
    ``drain`` take as ``api``."""

    def __init__(self, key):
        self._key = key

    def list_workers(self, router, timeout=10.0):
        return list_workers(router, timeout=timeout, key=self._key)

    def add_worker(self, router, url, timeout=10.0):
        return add_worker(router, url, timeout=timeout, key=self._key)

    def remove_worker(self, router, worker_id, url, timeout=10.0):
        return remove_worker(router, worker_id, url, timeout=timeout, key=self._key)

    def job_status(self, router, worker_id, timeout=10.0):
        return job_status(router, worker_id, timeout=timeout, key=self._key)

    def __repr__(self):
        return "Keyed(<key>)"


def api_for(key_file):
    """The API for a router whose key is in the env file ``key_file`` (no key sent without one)."""
    return Keyed(control_plane_key(key_file))
