#!/usr/bin/env python3
"""Speculative decoding served over HTTP (issue 30): batch-1 greedy decode speed of a
running `keel serve` on held-out English, and the acceptance the server reports.

Prompts are the first --prompt-words words of held-out paragraphs
(scripts/default_model/data/heldout.txt by default: text the default model and its
draft never trained on). Each request is sent alone (batch 1) to /v1/completions,
streamed, greedy, --max-tokens new tokens with ignore_eos; the decode rate is
(completion tokens - 1) / (time of the last token - time of the first), the end-to-end
rate completion tokens / request time. The acceptance comes from /api/status (the
difference over the run, so earlier traffic does not count).

Run it once against a server without speculation and once with it, same prompts:
  keel serve --port 8000 &                       # off
  python3 bench/spec_served.py --url http://127.0.0.1:8000 --label off
  keel serve --port 8001 --speculative draft:models/default/draft &
  python3 bench/spec_served.py --url http://127.0.0.1:8001 --label draft --json out.json
Python standard library only.
"""

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def prompts_from(path, n, words, min_words):
    out = []
    for para in Path(path).read_text(encoding="utf-8").split("\n"):
        w = para.split()
        if len(w) < min_words:
            continue
        out.append(" ".join(w[:words]))
        if len(out) == n:
            break
    if len(out) < n:
        sys.exit(f"spec_served: {path} has only {len(out)} paragraphs of {min_words}+ words")
    return out


def get_json(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def spec_status(url, model):
    status = get_json(url + "/api/status")
    for m in status.get("models", []):
        if model in (None, m.get("id")) and m.get("speculative"):
            return m["speculative"]
    return None


def one_request(url, model, prompt, max_tokens, timeout):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    text, tokens = [], None
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
            for c in ev.get("choices", []):
                if c.get("text"):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    text.append(c["text"])
    end = time.perf_counter()
    if tokens is None or first is None:
        raise RuntimeError("no usage or no text in the stream")
    return {"tokens": tokens, "decode_s": last - first, "e2e_s": end - t0,
            "text": "".join(text)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default=None, help="model id (default: the server's first)")
    ap.add_argument("--prompts", default=str(ROOT / "scripts/default_model/data/heldout.txt"))
    ap.add_argument("--num-prompts", type=int, default=24)
    ap.add_argument("--prompt-words", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2, help="requests sent first, not counted")
    ap.add_argument("--label", default="")
    ap.add_argument("--json", default=None, help="write the figures (and texts) here")
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()

    url = a.url.rstrip("/")
    model = a.model or get_json(url + "/v1/models")["data"][0]["id"]
    prompts = prompts_from(a.prompts, a.num_prompts + a.warmup, a.prompt_words,
                           a.prompt_words + 10)
    for p in prompts[:a.warmup]:
        one_request(url, model, p, a.max_tokens, a.timeout)
    before = spec_status(url, model)
    runs = [one_request(url, model, p, a.max_tokens, a.timeout) for p in prompts[a.warmup:]]
    after = spec_status(url, model)

    decode = [(r["tokens"] - 1) / r["decode_s"] for r in runs if r["decode_s"] > 0]
    total_tokens = sum(r["tokens"] for r in runs)
    result = {
        "label": a.label, "model": model, "requests": len(runs), "max_tokens": a.max_tokens,
        "decode_tok_s_median": statistics.median(decode),
        "decode_tok_s_mean": statistics.fmean(decode),
        "e2e_tok_s": total_tokens / sum(r["e2e_s"] for r in runs),
        "completion_tokens": total_tokens,
    }
    if before is not None and after is not None:
        steps = after["verify_steps"] - before["verify_steps"]
        drafted = after["drafted_tokens"] - before["drafted_tokens"]
        accepted = after["accepted_tokens"] - before["accepted_tokens"]
        per_pos = [x - y for x, y in zip(after["accepted_per_position"],
                                         before["accepted_per_position"])]
        result.update({
            "method": after["method"], "verify_steps": steps, "drafted": drafted,
            "accepted": accepted,
            "acceptance_rate": accepted / drafted if drafted else 0.0,
            "acceptance_length": 1 + accepted / steps if steps else 0.0,
            "accepted_per_position": per_pos,
            # --speculative-adaptive: drafting paused at batch 1, and the speed-up the
            # server measured there (None: not measured, or adaptive off).
            "paused": after.get("paused"), "speedup": after.get("speedup"),
        })
    print(json.dumps(result, indent=1))
    if a.json:
        result["texts"] = [r["text"] for r in runs]
        Path(a.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
