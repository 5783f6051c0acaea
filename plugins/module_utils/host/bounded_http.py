# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One HTTP exchange with an overall deadline and a bound on what it reads (round 3, M1).

A socket timeout bounds each wait for the next bytes only: a server that answers 200 with a large
Content-Length and then one byte every two seconds kept readiness, the drain and the fast path waiting
for ever. Here the whole exchange (connect, request, headers, body) has ``timeout`` seconds: when they
are spent a timer shuts the socket down, so a read blocked on a dripping server returns at once, and
the exchange fails naming the deadline. The body is read up to ``limit`` bytes; a larger one (announced
or sent) fails naming the bound. Only ``http://`` and ``https://`` URLs (m3: ``file://`` read files as
root). Straight to the server: no proxy from the environment, no credentials from ~/.netrc, no
redirect followed. Standard library only.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from urllib.parse import urlsplit

MAX_BODY_BYTES = 8 << 20


class HttpError(Exception):
    """No complete answer (refused, the deadline, too large, not http(s)); the message is one line naming the
    request, ``reason`` the cause alone."""

    def __init__(self, message, reason=None):
        super().__init__(message)
        self.reason = reason or message


def scheme_error(url):
    """None for an http:// or https:// URL with a host, else why it is refused (one line)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # a port that is not a number raises here
    except ValueError as exc:
        return "%s is not a valid URL: %s" % (url, exc)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "%s is not an http:// or https:// URL" % url
    return None


class Exchange:
    """``with Exchange(url, ...) as ex``: the request is sent and its status and headers read on entry
    (``ex.status``, ``ex.headers``); ``ex.read()`` and ``ex.readline()`` read the body within the deadline
    and the bound. Raises HttpError."""

    def __init__(self, url, method="GET", headers=None, data=None, timeout=30.0, limit=MAX_BODY_BYTES,
                 agent="dflash-deploy", clock=time.monotonic):
        error = scheme_error(url)
        if error:
            raise HttpError(error)
        self.url, self.method, self.data, self.limit = url, method, data, limit
        self.headers = dict(headers or {}, **{"User-Agent": agent})
        self.timeout, self.clock = float(timeout), clock
        self.read_bytes, self.expired, self.conn, self.resp, self.timer = 0, False, None, None, None
        self.status = None

    def _cut(self, sock):
        self.expired = True
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _failed(self, exc):
        # A socket timeout is as long as the whole exchange's: when it fires, the deadline has passed too (the
        # timer and the socket race for the same moment).
        if self.expired or isinstance(exc, (socket.timeout, TimeoutError)):
            why = "no complete answer within %ss (the deadline of the whole exchange)" % _seconds(self.timeout)
        else:
            why = " ".join(str(getattr(exc, "reason", exc)).split()) or type(exc).__name__
        return HttpError("%s %s: %s" % (self.method, self.url, why), why)

    def __enter__(self):
        parts = urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        deadline = self.clock() + self.timeout
        try:
            self.conn = kind(parts.hostname, parts.port, timeout=max(self.timeout, 0.001))
            self.conn.connect()
            self.timer = threading.Timer(max(deadline - self.clock(), 0.0), self._cut, [self.conn.sock])
            self.timer.daemon = True
            self.timer.start()
            self.conn.request(self.method, target, body=self.data, headers=self.headers)
            self.resp = self.conn.getresponse()
        except (OSError, http.client.HTTPException, ValueError) as exc:
            self.close()
            raise self._failed(exc) from None
        self.status = self.resp.status
        length = self.resp.getheader("Content-Length") or ""
        if length.strip().isdigit() and int(length) > self.limit:
            self.close()
            raise HttpError("%s %s answered %s with %s bytes, more than the %d read here"
                            % (self.method, self.url, self.status, length.strip(), self.limit))
        return self

    def _count(self, chunk):
        self.read_bytes += len(chunk)
        if self.read_bytes > self.limit:
            raise HttpError("%s %s answered more than the %d bytes read here" % (self.method, self.url, self.limit))
        return chunk

    def read(self):
        """The whole body (bytes)."""
        chunks = []
        try:
            while True:
                chunk = self.resp.read1(65536)
                if not chunk:
                    break
                chunks.append(self._count(chunk))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise self._failed(exc) from None
        if self.expired:
            raise self._failed(None)
        if self.resp.length:  # the server closed before the length it announced
            raise HttpError("%s %s answered %s and ended %d bytes short of its Content-Length"
                            % (self.method, self.url, self.status, self.resp.length))
        return b"".join(chunks)

    def readline(self, limit):
        """One line of the body (b'' at its end), at most ``limit`` bytes."""
        try:
            line = self.resp.readline(limit)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise self._failed(exc) from None
        if self.expired:
            raise self._failed(None)
        return self._count(line)

    def close(self):
        if self.timer is not None:
            self.timer.cancel()
        if self.conn is not None:
            self.conn.close()
        if self.resp is not None:
            self.resp.close()

    def __exit__(self, *exc_info):
        self.close()
        return False


def fetch(url, method="GET", headers=None, data=None, timeout=30.0, limit=MAX_BODY_BYTES, agent="dflash-deploy"):
    """(status, body bytes) of one exchange within ``timeout`` seconds in all; raises HttpError."""
    with Exchange(url, method, headers, data, timeout, limit, agent) as ex:
        return ex.status, ex.read()


def _seconds(value):
    """``10`` for 10.0, ``2.5`` for 2.5, ``3`` for 2.987: a deadline as a reason names it."""
    return "%g" % round(float(value), 1)
