#!/usr/bin/env python3
"""Ask a running SGLang server for tokens, OpenAI-style and natively; write what came back.

  python3 sglang_client.py --port 30001 --model tiny-dflash --out results.json [--api-key-env-file F]
  python3 sglang_client.py --compare A.json B.json --out equal.json

Requests (greedy, temperature 0): POST /generate (one prompt, 32 tokens; then two prompts, 48
tokens), POST /v1/completions, POST /v1/chat/completions, GET /v1/models. Each is timed; the first
/generate is the first request after readiness. --compare says whether two servers' greedy
outputs are equal token for token (/generate output_ids, completion and chat texts). Exit 0
when every request answered 200 with at least one token (or, with --compare, when all are
equal). Standard library only; loopback only; bounded in count and time.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def call(base: str, path: str, body, timeout: float, key: str):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method="POST" if body is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", "Bearer " + key)
    t = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, text = resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "seconds": round(time.monotonic() - t, 3)}
    try:
        payload = json.loads(text)
    except ValueError:
        payload = text[:1000]
    return {"status": status, "seconds": round(time.monotonic() - t, 3), "body": payload}


def tokens(res: dict) -> list:
    """Per request, the greedy output: /generate output_ids, else the texts."""
    out = {}
    for name in ("generate", "generate_batch"):
        body = res.get(name, {}).get("body")
        items = body if isinstance(body, list) else [body]
        out[name] = [i.get("output_ids") if isinstance(i, dict) else None for i in items]
        out[name + "_text"] = [i.get("text") if isinstance(i, dict) else None for i in items]
    for name in ("completions", "chat"):
        body = res.get(name, {}).get("body")
        try:
            choice = body["choices"][0]
            out[name] = choice.get("text") if name == "completions" else choice["message"]["content"]
        except (TypeError, KeyError, IndexError):
            out[name] = None
    return out


def compare(a_path: str, b_path: str, out: str) -> int:
    a, b = (json.load(open(p)) for p in (a_path, b_path))
    ta, tb = tokens(a), tokens(b)
    result = {"a": a_path, "b": b_path, "equal": {}, "a_tokens": ta, "b_tokens": tb}
    for k in ta:
        result["equal"][k] = ta[k] is not None and ta[k] == tb.get(k) and ta[k] not in ([None], [None, None], "", [])
    result["all_equal"] = all(result["equal"].values())
    json.dump(result, open(out, "w"), indent=1)
    print(json.dumps({"equal": result["equal"], "all_equal": result["all_equal"]}))
    return 0 if result["all_equal"] else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=30001)
    ap.add_argument("--model", default="")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", nargs=2)
    a = ap.parse_args()
    if a.compare:
        return compare(a.compare[0], a.compare[1], a.out)
    base = f"http://127.0.0.1:{a.port}"
    greedy = {"temperature": 0}
    calls = [
        ("generate", "/generate",
         {"text": "The capital city of France is", "sampling_params": dict(greedy, max_new_tokens=32)}),
        ("generate_batch", "/generate",
         {"text": ["Hello", "One two three"], "sampling_params": dict(greedy, max_new_tokens=48)}),
        ("completions", "/v1/completions",
         {"model": a.model, "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}),
        ("chat", "/v1/chat/completions",
         {"model": a.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "temperature": 0}),
        ("models", "/v1/models", None),
    ]
    res: dict = {"port": a.port, "model": a.model}
    ok = True
    for name, path, body in calls:
        res[name] = call(base, path, body, a.timeout, a.api_key)
        r = res[name]
        good = r.get("status") == 200
        if good and name in ("generate", "generate_batch"):
            items = r["body"] if isinstance(r["body"], list) else [r["body"]]
            good = all(int(i.get("meta_info", {}).get("completion_tokens", 0)) > 0 for i in items)
        if good and name in ("completions", "chat"):
            good = int(r["body"].get("usage", {}).get("completion_tokens", 0)) > 0
        ok = ok and good
        print(f"[client] {name}: {r.get('status', r.get('error'))} in {r['seconds']}s", flush=True)
    meta = res["generate"].get("body", {}).get("meta_info", {}) if isinstance(res["generate"].get("body"), dict) else {}
    res["summary"] = {
        "first_generate_s": res["generate"].get("seconds"),
        "completion_tokens": meta.get("completion_tokens"),
        "spec_verify_ct": meta.get("spec_verify_ct"),
        "spec_accept_length": meta.get("spec_accept_length"),
        "completions_text": tokens(res)["completions"],
        "chat_text": tokens(res)["chat"],
        "ok": ok,
    }
    print("[client] " + json.dumps(res["summary"]), flush=True)
    res["ok"] = ok
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
