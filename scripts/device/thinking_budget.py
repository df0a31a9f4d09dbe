#!/usr/bin/env python3
"""A thinking budget under `keel serve --device cuda` (the engine swaps in the
end-of-thinking tokens after the sampler, which on CUDA runs on the GPU).

Serves a copy of the built-in default model whose chat template opens a <think> block,
asks Anthropic /v1/messages for thinking with budget_tokens 8 at temperature 0, and
checks that the thinking block is bounded (at most 16 tokens re-encoded) and that a text
answer follows; then the same with a budget beyond max_tokens, where no answer may
follow. Exit status 0 only if both hold. Run from the repository root:

    python3 scripts/device/thinking_budget.py KEEL_BINARY [--device cuda]
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def call(port, path, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read().decode())


def parts(msg):
    thinking = "".join(b.get("thinking", "") for b in msg["content"] if b["type"] == "thinking")
    text = "".join(b.get("text", "") for b in msg["content"] if b["type"] == "text")
    return thinking, text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("keel")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--port", type=int, default=8198)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="keel-think-"))
    model = tmp / "thinker"
    shutil.copytree("models/default", model)
    tc_path = model / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["chat_template"] = (
        "{{ bos_token }}{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + "
        "'<|eos|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n<think>\\n' }}"
        "{% endif %}")
    tc_path.write_text(json.dumps(tc))
    srv = subprocess.Popen([a.keel, "serve", str(model), "--device", a.device, "--port", str(a.port)])
    ok = True
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{a.port}/v1/models", timeout=5)
                break
            except Exception:
                if time.time() > deadline or srv.poll() is not None:
                    print("FAIL: the server did not start")
                    return 1
                time.sleep(0.5)
        ask = {"model": "thinker", "max_tokens": 48, "temperature": 0,
               "messages": [{"role": "user", "content": "Tell me about Debian."}]}
        msg = call(a.port, "/v1/messages", {**ask, "thinking": {"type": "enabled", "budget_tokens": 8}})
        thinking, text = parts(msg)
        n = call(a.port, "/tokenize", {"model": "thinker", "prompt": thinking,
                                       "add_special_tokens": False})["count"]
        print(f"budget 8: {n} thinking tokens {thinking!r}; answer {text!r}")
        if not thinking or n > 16 or not text.strip():
            print("FAIL: the thinking is not bounded or no answer follows")
            ok = False
        ctl = call(a.port, "/v1/messages", {**ask, "thinking": {"type": "enabled", "budget_tokens": 4096}})
        c_thinking, c_text = parts(ctl)
        print(f"budget 4096: thinking {c_thinking!r}; answer {c_text!r}")
        if c_text.strip():
            print("FAIL: an answer without the budget closing the block")
            ok = False
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
