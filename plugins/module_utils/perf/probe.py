# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The performance probe: a fixed set of greedy requests of a fixed length, streamed from one
SGLang instance's ``/generate``, each chunk timed as it arrives.

Why ``/generate`` and not ``/v1/completions``: SGLang reports the speculative acceptance only in
``/generate``'s ``meta_info`` (``spec_verify_ct``, ``spec_accept_length``, set on the last chunk of
a finished request when the server runs a speculative algorithm); the OpenAI routes drop it. With
``"stream": true`` SGLang answers server-sent events, ``data: {json}`` lines, each chunk's
``meta_info.completion_tokens`` counting the tokens so far, an ``{"error": ...}`` event when the
request fails, and ``data: [DONE]`` at the end. ``ignore_eos`` keeps every answer at ``max_tokens``.

The plan (``ProbePlan``) and its identity (``identity``, a digest of everything that decides what
the server is asked) are pure; ``parse_event`` and ``timing_of`` turn the stream into a
``RequestTiming``; ``stream_one`` is the I/O (``bounded_http``: an overall deadline and a size bound
per request), and ``run`` runs the
plan with the clock and the transport replaceable for tests. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

from ansible_collections.dflash.deploy.plugins.module_utils.host.bounded_http import Exchange, HttpError

ENDPOINT = "/generate"
PLAN_FORMAT = 1  # part of the identity: a change in how the probe asks makes old figures incomparable
MAX_EVENT_BYTES = 16 << 20  # one event line; SGLang's non-incremental chunks repeat the text so far
MAX_STREAM_BYTES = 256 << 20  # one request's whole stream

# Fixed texts: short, plain, and unlike each other, so no prefix is shared between them and each
# request pays its own prefill.
DEFAULT_PROMPTS = (
    "The capital city of France is",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "List the first ten prime numbers and explain why 1 is not one of them.",
    "def fibonacci(n):",
)
DEFAULT_MAX_TOKENS = 64


class ProbeError(Exception):
    """The probe could not measure: the server refused, failed or never answered (the message says which)."""


@dataclass(frozen=True)
class ProbePlan:
    """What the probe asks: each prompt (a text, or a tuple of token ids) once, greedy, exactly
    ``max_tokens`` tokens, one request at a time, after ``warmup`` unmeasured requests."""

    prompts: tuple = DEFAULT_PROMPTS
    max_tokens: int = DEFAULT_MAX_TOKENS
    warmup: int = 1

    def as_dict(self):
        return {"endpoint": ENDPOINT, "prompts": len(self.prompts), "max_tokens": self.max_tokens,
                "warmup": self.warmup, "digest": identity(self)}


def make_plan(prompts=None, max_tokens=DEFAULT_MAX_TOKENS, warmup=1):
    """A ``ProbePlan`` from options: ``prompts`` a list of texts and/or lists of token ids (None:
    the default texts). Raises ValueError naming what is wrong."""
    if prompts is None:
        prompts = DEFAULT_PROMPTS
    if not prompts:
        raise ValueError("prompts must name at least one prompt")
    fixed = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, str) and prompt:
            fixed.append(prompt)
        elif isinstance(prompt, (list, tuple)) and prompt and all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            fixed.append(tuple(prompt))
        else:
            raise ValueError("prompt %d is neither a non-empty text nor a non-empty list of token ids: %r"
                             % (i + 1, prompt))
    if int(max_tokens) < 2:
        raise ValueError("max_tokens must be at least 2 (one token after the first, for the inter-token latency)")
    if int(warmup) < 0:
        raise ValueError("warmup must not be negative")
    return ProbePlan(prompts=tuple(fixed), max_tokens=int(max_tokens), warmup=int(warmup))


def request_body(plan, prompt):
    """The ``/generate`` request for one prompt: greedy, exactly ``max_tokens`` tokens, streamed."""
    body = {"input_ids": list(prompt)} if isinstance(prompt, tuple) else {"text": prompt}
    body["sampling_params"] = {"max_new_tokens": plan.max_tokens, "temperature": 0, "ignore_eos": True}
    body["stream"] = True
    return body


def identity(plan):
    """sha256 of what the server is asked (endpoint, each request body, the warm-up count, the plan's
    format): two sets of figures compare only when this is equal."""
    canon = {"format": PLAN_FORMAT, "endpoint": ENDPOINT, "warmup": plan.warmup,
             "requests": [request_body(plan, p) for p in plan.prompts]}
    return hashlib.sha256(json.dumps(canon, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


# -- the stream ----------------------------------------------------------------------------------

DONE = "done"


def parse_event(line):
    """One line of the event stream: None (a blank line, a comment, a field other than data), DONE
    (``data: [DONE]``), or the chunk's JSON object. Raises ProbeError on an ``{"error": ...}`` event
    or data that is not a JSON object."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.rstrip("\r\n")
    if not text.startswith("data:"):
        return None
    data = text[5:].strip()
    if data == "[DONE]":
        return DONE
    try:
        chunk = json.loads(data)
    except ValueError:
        raise ProbeError("the stream sent data that is not JSON: %r" % data[:200]) from None
    if not isinstance(chunk, dict):
        raise ProbeError("the stream sent data that is not a JSON object: %r" % data[:200])
    if "error" in chunk:
        err = chunk["error"]
        message = err.get("message") if isinstance(err, dict) else err
        raise ProbeError("the server failed the request: %s" % message)
    return chunk


def _count(value):
    """A non-negative int from a JSON field, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if value >= 0 else None


@dataclass(frozen=True)
class RequestTiming:
    """One request as the probe saw it: when it was sent, each chunk that brought tokens as
    (time, tokens so far), when the stream ended, the tokens the server counted, and its verify
    steps (None when the server reports none: no speculative decoding). Times are seconds on one
    monotonic clock."""

    sent: float
    chunks: tuple
    done: float
    completion_tokens: int
    verify_ct: int | None = None


def timing_of(sent, events, done):
    """A ``RequestTiming`` from ``events``, the chunks as (arrival time, parsed JSON object) in order.
    A chunk's ``meta_info.completion_tokens`` counts the tokens so far (SGLang's streams, incremental
    or not); a chunk without it counts as one token more. Chunks that bring no new token (a last
    chunk that only says why the request finished) are not arrivals. ``spec_verify_ct`` is read from
    the last chunk that carries it."""
    chunks = []
    tokens, verify = 0, None
    for when, chunk in events:
        meta = chunk.get("meta_info") if isinstance(chunk.get("meta_info"), dict) else {}
        counted = _count(meta.get("completion_tokens"))
        now = counted if counted is not None else tokens + 1
        if _count(meta.get("spec_verify_ct")) is not None:
            verify = _count(meta.get("spec_verify_ct"))
        if now > tokens:
            chunks.append((when, now))
            tokens = now
    return RequestTiming(sent=sent, chunks=tuple(chunks), done=done, completion_tokens=tokens, verify_ct=verify)


# -- I/O at the edge -----------------------------------------------------------------------------

def stream_one(url, body, key, timeout, clock=time.monotonic):
    """POST ``body`` to ``url`` and read its event stream; a ``RequestTiming``. Straight to the
    instance: no proxy from the environment, no credentials from ~/.netrc. ``timeout`` bounds the whole
    request (the connection, the answer and its stream: a server dripping its stream fails the probe
    then), MAX_STREAM_BYTES what is read. Raises ProbeError."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = json.dumps(body).encode("utf-8")
    events = []
    sent = clock()
    try:
        with Exchange(url, "POST", headers, data, timeout=timeout, limit=MAX_STREAM_BYTES,
                      agent="dflash-perf-probe") as resp:
            if resp.status >= 400:
                raise ProbeError("POST %s answered %s%s" % (url, resp.status, _error_text(resp)))
            while True:
                line = resp.readline(MAX_EVENT_BYTES)
                if not line:
                    break
                event = parse_event(line)
                if event is DONE:
                    break
                if event is not None:
                    events.append((clock(), event))
    except HttpError as exc:
        raise ProbeError(str(exc)) from None
    done = events[-1][0] if events else clock()
    timing = timing_of(sent, events, done)
    if not timing.chunks:
        raise ProbeError("POST %s streamed no tokens" % url)
    return timing


def _error_text(resp):
    """': <message>' from an error answer's JSON body (SGLang's {"message": ...} or {"error": ...}), else ''."""
    try:
        body = json.loads(resp.readline(4096).decode("utf-8", "replace"))
    except (ValueError, HttpError):
        return ""
    if isinstance(body, dict):
        message = body.get("message") or body.get("error") or body.get("detail")
        if isinstance(message, dict):
            message = message.get("message")
        if message:
            return ": %s" % message
    return ""


def run(base, plan, key="", timeout=120, send=stream_one):
    """The plan's warm-up requests (answers dropped), then one timed request per prompt, in order, one
    at a time; the ``RequestTiming`` of each timed request. The first request after a start pays for
    the server's kernel compiles (tens of seconds on a fresh cache); the warm-up keeps it out of the
    figures."""
    url = base.rstrip("/") + ENDPOINT
    for i in range(plan.warmup):
        send(url, request_body(plan, plan.prompts[i % len(plan.prompts)]), key, timeout)
    return [send(url, request_body(plan, p), key, timeout) for p in plan.prompts]
