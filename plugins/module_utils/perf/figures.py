# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The probe's figures, from the timed requests (``probe.RequestTiming``):

- ``ttft_ms``: time to first token, the median over the requests of (first chunk - request sent);
- ``itl_ms``: inter-token latency, the median over every token after each request's first of
  (gap since the chunk before) / (tokens the chunk brought). A chunk of speculative decoding brings
  several tokens at once; each of them counts, at its share of the gap;
- ``output_tokens_per_s``: all tokens counted, divided by the time from each request sent to its
  stream's end, summed (one request at a time: the rate one user sees);
- ``acceptance``: tokens per verify step, all tokens over all ``spec_verify_ct`` (SGLang's
  ``spec_accept_length`` for the whole probe); None when no request reported a verify step.

Pure functions; standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

FIGURES = ("ttft_ms", "itl_ms", "output_tokens_per_s", "acceptance")


@dataclass(frozen=True)
class Figures:
    ttft_ms: float | None
    itl_ms: float | None
    output_tokens_per_s: float | None
    acceptance: float | None
    requests: int = 0
    output_tokens: int = 0

    def as_dict(self):
        return {"ttft_ms": self.ttft_ms, "itl_ms": self.itl_ms, "output_tokens_per_s": self.output_tokens_per_s,
                "acceptance": self.acceptance, "requests": self.requests, "output_tokens": self.output_tokens}


def median(values):
    """The median of a non-empty sequence (the mean of the two middle values for an even count); None when empty."""
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return None
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def token_gaps(timing):
    """One inter-token latency (seconds) per token after the request's first: each chunk's gap since
    the chunk before, shared by the tokens it brought."""
    gaps = []
    for (before, had), (when, now) in zip(timing.chunks, timing.chunks[1:]):
        brought = now - had
        gaps.extend([(when - before) / brought] * brought)
    return gaps


def _rounded(value, places):
    return None if value is None else round(value, places)


def figures(timings):
    """``Figures`` of a list of ``RequestTiming`` (each with at least one chunk)."""
    timings = [t for t in timings if t.chunks]
    ttft = median([t.chunks[0][0] - t.sent for t in timings])
    gaps = [g for t in timings for g in token_gaps(t)]
    itl = median(gaps)
    tokens = sum(t.completion_tokens for t in timings)
    elapsed = sum(t.done - t.sent for t in timings)
    rate = tokens / elapsed if elapsed > 0 else None
    spec = [t for t in timings if t.verify_ct]
    acceptance = (sum(t.completion_tokens for t in spec) / float(sum(t.verify_ct for t in spec))) if spec else None
    return Figures(
        ttft_ms=_rounded(None if ttft is None else ttft * 1000.0, 3),
        itl_ms=_rounded(None if itl is None else itl * 1000.0, 3),
        output_tokens_per_s=_rounded(rate, 3),
        acceptance=_rounded(acceptance, 4),
        requests=len(timings),
        output_tokens=tokens,
    )
