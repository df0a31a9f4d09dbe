#!/usr/bin/env python3
"""End-to-end smoke of `keel serve --device cuda` on the GPU machine.

Starts keel serve (the built-in default model unless a path is given), waits for
/health, sends a plain and a streamed chat completion and a completion with logprobs,
prints what came back and /api/status, then stops the server with SIGTERM and checks
that it exits 0. Exit status 0 only if every step worked.

    python3 scripts/device/serve_smoke.py KEEL_BINARY [--device cuda] [--model PATH]
"""
import argparse
import json
import signal
import subprocess
import sys
import time
import urllib.request


def call(port, path, body=None, timeout=60):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("keel")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default=None)
    ap.add_argument("--port", type=int, default=8199)
    a = ap.parse_args()
    cmd = [a.keel, "serve", "--device", a.device, "--port", str(a.port)]
    if a.model:
        cmd.append(a.model)
    srv = subprocess.Popen(cmd)
    ok = True
    try:
        deadline = time.time() + 90
        while True:
            try:
                st, _ = call(a.port, "/v1/models", timeout=5)
                if st == 200:
                    break
            except Exception:
                pass
            if time.time() > deadline or srv.poll() is not None:
                print("server did not come up", file=sys.stderr)
                return 1
            time.sleep(0.5)
        _, models = call(a.port, "/v1/models")
        model = json.loads(models)["data"][0]["id"]
        print("model:", model)
        t0 = time.time()
        _, chat = call(a.port, "/v1/chat/completions", {
            "model": model, "max_tokens": 64, "temperature": 0,
            "messages": [{"role": "user", "content": "Tell me about Debian."}]})
        c = json.loads(chat)
        print(f"chat ({time.time() - t0:.2f} s):", json.dumps(c["choices"][0]["message"]["content"]),
              c["usage"])
        ok &= bool(c["choices"][0]["message"]["content"])
        _, stream = call(a.port, "/v1/chat/completions", {
            "model": model, "max_tokens": 32, "stream": True,
            "messages": [{"role": "user", "content": "Once upon a time"}]})
        events = [l for l in stream.splitlines() if l.startswith("data: ")]
        print("stream events:", len(events), "last:", events[-1] if events else None)
        ok &= bool(events) and events[-1] == "data: [DONE]"
        _, comp = call(a.port, "/v1/completions", {
            "model": model, "prompt": "The package manager", "max_tokens": 16, "logprobs": 3,
            "temperature": 0})
        cj = json.loads(comp)
        print("completion:", json.dumps(cj["choices"][0]["text"]),
              "logprobs:", cj["choices"][0]["logprobs"]["token_logprobs"][:4])
        _, status = call(a.port, "/api/status")
        print("status:", status[:600])
        _, health = call(a.port, "/health")
        print("health:", health[:300])
    except Exception as e:  # report and fail
        print("smoke failed:", repr(e), file=sys.stderr)
        ok = False
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            rc = srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
            rc = "killed after 30 s"
        print("serve exit:", rc)
        ok &= rc == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
