#!/usr/bin/env python3
"""Serving load against a running `keel serve`, then the KV pool check (issue 21).

N concurrent streams each send streamed /v1/completions with a random token-id prompt
of --input tokens and --output tokens (ignore_eos), --requests in all (default: one
round per stream). Prints output tokens/s over the run, time to first token (median,
p99) and errors. Then waits until /api/status shows the model idle and checks that its
KV blocks in use went back to 0 (cached blocks stay findable, and are free): exit 1 if
not, or if any request failed. With --long N, first sends one request of N tokens in
all (N - 8 prompt tokens, 8 generated: a full context of N) and checks that it is
accepted and completes.

    python3 scripts/device/serve_load.py URL MODEL [--streams 256] [--input 512]
        [--output 128] [--requests N] [--vocab 32000] [--long 131072]
"""
import argparse
import json
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request


def post_stream(url, body, timeout):
    """Returns (ttft_s, output_tokens, error)."""
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t0 = time.time()
    ttft, n = None, 0
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    return ttft, n, str(ev["error"])
                # The first choice event is the first token (a random model's text may
                # be empty: special tokens decode to nothing).
                if ev.get("choices") and ttft is None:
                    ttft = time.time() - t0
                if ev.get("usage"):  # the last chunk (stream_options.include_usage)
                    n = ev["usage"]["completion_tokens"]
        return ttft, n, None
    except urllib.error.HTTPError as e:
        return ttft, n, f"HTTP {e.code}: {e.read().decode()[:300]}"
    except Exception as e:  # a dropped connection is a failed request
        return ttft, n, repr(e)


def get(url, path):
    with urllib.request.urlopen(url + path, timeout=30) as r:
        return json.loads(r.read().decode())


def model_status(url, model):
    for m in get(url, "/api/status")["models"]:
        if m["id"] == model:
            return m
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--input", type=int, default=512)
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--requests", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--long", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", action="store_true",
                    help="before timing, one wave of --streams short requests: loads the model "
                         "and captures its graphs, which a timed run would otherwise include")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    ok = True
    if a.long:
        prompt = [rng.randrange(100, a.vocab) for _ in range(a.long - 8)]
        t0 = time.time()
        ttft, n, err = post_stream(a.url, {"model": a.model, "prompt": prompt, "max_tokens": 8,
                                           "temperature": 0, "ignore_eos": True, "stream": True,
                                           "stream_options": {"include_usage": True}},
                                   a.timeout)
        print(f"long request: {a.long - 8} prompt + 8 tokens: "
              + (f"FAILED: {err}" if err else
                 f"accepted, {n} tokens out, first after {ttft:.2f} s, {time.time() - t0:.2f} s in all"))
        ok &= err is None and n == 8
    if a.warmup:
        t0 = time.time()
        body = {"model": a.model, "prompt": [rng.randrange(100, a.vocab) for _ in range(a.input)],
                "max_tokens": 8, "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        first = post_stream(a.url, body, a.timeout)  # the model loads here, once
        wave = [threading.Thread(target=post_stream, args=(a.url, body, a.timeout))
                for _ in range(a.streams)]
        for t in wave:
            t.start()
        for t in wave:
            t.join()
        print(f"warm-up: model ready and {a.streams} short requests in {time.time() - t0:.1f} s"
              + (f" (first request failed: {first[2]})" if first[2] else ""))
    total = a.requests or a.streams
    lock = threading.Lock()
    next_i = [0]
    ttfts, errors, tokens = [], [], [0]

    def worker():
        while True:
            with lock:
                if next_i[0] >= total:
                    return
                next_i[0] += 1
                prompt = [rng.randrange(100, a.vocab) for _ in range(a.input)]
            ttft, n, err = post_stream(a.url, {"model": a.model, "prompt": prompt,
                                               "max_tokens": a.output, "temperature": 0,
                                               "ignore_eos": True, "stream": True,
                                           "stream_options": {"include_usage": True}}, a.timeout)
            with lock:
                tokens[0] += n
                if err:
                    errors.append(err)
                elif ttft is not None:
                    ttfts.append(ttft)

    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(min(a.streams, total))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    ttfts.sort()
    p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] if ttfts else float("nan")
    print(f"load: {total} requests, {a.streams} streams, {a.input} in / {a.output} out: "
          f"{tokens[0] / wall:,.0f} output tok/s over {wall:.1f} s; TTFT median "
          f"{statistics.median(ttfts) if ttfts else float('nan'):.2f} s, p99 {p99:.2f} s; "
          f"{len(errors)} errors")
    for e in errors[:5]:
        print("  error:", e)
    ok &= not errors
    # The pool after the run: nothing running, no block in use (cached ones are free).
    deadline = time.time() + 15
    m = model_status(a.url, a.model)
    while time.time() < deadline and not (m and m.get("running") == 0 and m.get("waiting") == 0
                                          and m.get("kv_blocks", {}).get("used") == 0):
        time.sleep(0.2)
        m = model_status(a.url, a.model)
    kv = (m or {}).get("kv_blocks", {})
    print(f"after the run: running {m and m.get('running')}, waiting {m and m.get('waiting')}, "
          f"KV blocks used {kv.get('used')} of {kv.get('total')} ({kv.get('cached')} cached)")
    ok &= kv.get("used") == 0
    print("kv_pool:", json.dumps((m or {}).get("kv_pool")))
    print("memory:", json.dumps((m or {}).get("memory")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
