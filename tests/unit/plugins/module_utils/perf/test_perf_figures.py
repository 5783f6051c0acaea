"""perf/figures.py: time to first token, inter-token latency (a chunk's gap shared by the tokens it
brought), output tokens per second and acceptance from timed requests."""
from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.perf import figures as F
from ansible_collections.dflash.deploy.plugins.module_utils.perf.probe import RequestTiming


def test_median():
    assert F.median([]) is None
    assert F.median([3]) == 3 and F.median([3, 1, 2]) == 2 and F.median([4, 1, 3, 2]) == 2.5


def test_a_chunk_of_several_tokens_shares_its_gap():
    t = RequestTiming(sent=0.0, chunks=((0.1, 1), (0.13, 4), (0.15, 5)), done=0.15, completion_tokens=5)
    assert F.token_gaps(t) == pytest.approx([0.01, 0.01, 0.01, 0.02])
    assert F.token_gaps(RequestTiming(sent=0.0, chunks=((0.1, 3),), done=0.1, completion_tokens=3)) == []


def test_figures_of_plain_decoding():
    """One token per chunk, no verify steps: acceptance is None."""
    a = RequestTiming(sent=0.0, chunks=((0.12, 1), (0.14, 2), (0.16, 3)), done=0.16, completion_tokens=3)
    b = RequestTiming(sent=1.0, chunks=((1.10, 1), (1.13, 2), (1.16, 3)), done=1.16, completion_tokens=3)
    c = RequestTiming(sent=2.0, chunks=((2.20, 1), (2.22, 2), (2.24, 3)), done=2.24, completion_tokens=3)
    f = F.figures([a, b, c])
    assert f.ttft_ms == pytest.approx(120.0) and f.itl_ms == pytest.approx(20.0)
    assert f.output_tokens_per_s == pytest.approx(9 / 0.56, abs=1e-3)
    assert f.acceptance is None and f.requests == 3 and f.output_tokens == 9
    assert set(f.as_dict()) == set(F.FIGURES) | {"requests", "output_tokens"}


def test_figures_of_speculative_decoding():
    """Acceptance is all tokens over all verify steps (SGLang's spec_accept_length over the probe)."""
    a = RequestTiming(sent=0.0, chunks=((0.05, 1), (0.08, 4), (0.11, 7)), done=0.11, completion_tokens=7,
                      verify_ct=2)
    b = RequestTiming(sent=1.0, chunks=((1.05, 1), (1.08, 3), (1.11, 5), (1.14, 7)), done=1.14,
                      completion_tokens=7, verify_ct=3)
    f = F.figures([a, b])
    assert f.acceptance == pytest.approx(14 / 5) and f.ttft_ms == pytest.approx(50.0)
    assert f.itl_ms == pytest.approx(12.5)  # gaps of 10 ms (6 tokens) and 15 ms (6 tokens)


def test_no_tokens_no_figures():
    f = F.figures([RequestTiming(sent=0.0, chunks=(), done=0.0, completion_tokens=0)])
    assert (f.ttft_ms, f.itl_ms, f.output_tokens_per_s, f.acceptance, f.requests) == (None, None, None, None, 0)
