#!/usr/bin/env python3
"""Issue 8's wedge scenario suite, standard library only, for machines without node
(the H200 box). Same scenarios and pass criteria as tests/api/wedge_scenarios.test.mjs,
driven over raw HTTP against a real `keel serve`:

  python3 tests/faults/wedge_scenarios.py --keel build/keel --model models/default \
      [--device cuda] [--rounds 2] [--seed N] [--out result.json]

Pass, after every round: every request ended (completed or failed) within its
deadline; /api/status back to zero running and waiting with no KV block in use; a
probe completes; no orphan engine process; greedy outputs equal the reference run.
Exit status 0 when every scenario passed.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

DEADLINE_S = 2.0
REQ_S = 15.0
TEXTS = ["The keeper of the lighthouse wrote in his log every night. ",
         "Rain fell on the harbour town all winter long. ",
         "A clock in the hall struck seven and the guests sat down. ",
         "Ships came in at dawn with salt and wool and news. ",
         "The road north went over the hills and past the mill. ",
         "She kept bees behind the house and sold the honey. "]
LONG = [t * 10 for t in TEXTS]
CHURN = [("Once more: " + t) * 10 for t in TEXTS]  # overflows the 64-block pool with LONG


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/status") as f:
            return not re.search(r"^State:\s+Z", f.read(), re.M)
    except OSError:
        return False


class Server:
    def __init__(self, keel, models, args, device):
        self.dir = tempfile.mkdtemp(prefix="keel-wedge-py-")
        md = os.path.join(self.dir, "models")
        os.makedirs(md)
        for mid, src in models.items():
            os.symlink(os.path.abspath(src), os.path.join(md, mid))
        self.logf = os.path.join(self.dir, "serve.log")
        cmd = [keel, "serve", "--port", "0", "--workers", "16", "--model-dir", md,
               "--device", device, "--cache-dir", os.path.join(self.dir, "cache")] + args
        if device == "cpu":
            cmd += ["--threads", "1"]
        self.proc = subprocess.Popen(cmd, stdout=open(self.logf, "w"), stderr=subprocess.STDOUT)
        self.pids = set()
        for _ in range(800):
            m = re.search(r"listening on http://([\d.]+):(\d+)", self.log())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.025)
        raise Failed("keel serve did not start:\n" + self.log())

    def log(self):
        with open(self.logf, errors="replace") as f:
            return f.read()

    def call(self, method, path, body=None, timeout=REQ_S):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        data = None if body is None else json.dumps(body)
        c.request(method, path, body=data, headers={"content-type": "application/json"} if data else {})
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        c.close()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text

    def status(self):
        s, j = self.call("GET", "/api/status")
        check(s == 200, f"/api/status {s}")
        for m in j["models"]:
            if m.get("pid", 0) > 0:
                self.pids.add(m["pid"])
        return j

    def model(self, mid="m"):
        return next(m for m in self.status()["models"] if m["id"] == mid)

    def complete(self, prompt, max_tokens=8, model="m"):
        s, j = self.call("POST", "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                                    "temperature": 0, "ignore_eos": True})
        if s != 200:
            raise RuntimeError(f"{s} {j}")
        return j["choices"][0]["text"]

    def stream(self, prompt, max_tokens, abort_after=None, abort_in=None, model="m"):
        """Streams a completion. Returns text; raises RuntimeError on an error event.
        abort_after=N closes the connection after N chunks; abort_in=S after S seconds."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=REQ_S)
        c.request("POST", "/v1/completions", body=json.dumps(
            {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
             "temperature": 0}), headers={"content-type": "application/json"})
        if abort_in is not None:
            threading.Timer(abort_in, lambda: c.sock and c.sock.shutdown(2)).start()
        try:
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError(f"{r.status} {r.read()[:200]}")
            text, n = "", 0
            for line in r:
                line = line.decode("utf-8", "replace").strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    return text
                j = json.loads(line[6:])
                if "error" in j:
                    raise RuntimeError(j["error"]["message"])
                text += j["choices"][0].get("text", "")
                n += 1
                if abort_after is not None and n >= abort_after:
                    return "aborted"
            return text if abort_in is None else "aborted"
        except OSError:
            if abort_in is not None:
                return "aborted"
            raise
        finally:
            c.close()

    def inject(self, **fault):
        s, j = self.call("POST", "/debug/faults", {"model": "m", **fault})
        check(s == 200, f"inject {fault}: {s} {j}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            rc = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "killed"
        line = re.search(r"keel serve: exited cleanly.*", self.log())
        time.sleep(0.2)
        left = [p for p in self.pids if alive(p)]
        shutil.rmtree(self.dir, ignore_errors=True)
        check(rc == 0, f"serve exited with {rc}")
        check(not left, f"engines left behind: {left}")
        return line.group(0) if line else "no exit line"


def ends(seconds, fn, *a, **kw):
    """Runs fn in a thread; (ok, value_or_error). Fails the scenario if it runs past its deadline."""
    out = {}

    def run():
        try:
            out["v"] = (True, fn(*a, **kw))
        except Exception as e:  # noqa: BLE001 - any failure is an ended request
            out["v"] = (False, e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out, seconds


def wait_all(jobs):
    res = []
    for t, out, seconds in jobs:
        t.join(seconds + 2)
        check(not t.is_alive(), f"a request did not end within {seconds} s")
        res.append(out["v"])
    return res


def wait_for(fn, seconds, what):
    until = time.time() + seconds
    while True:
        v = fn()
        if v:
            return v
        if time.time() > until:
            raise Failed(f"timed out waiting for {what}")
        time.sleep(0.025)


def settled(srv, ref, prompts, model="m"):
    def idle():
        m = srv.model(model)
        ok = (m["state"] == "ready" and m["running"] == 0 and m["waiting"] == 0 and
              m.get("kv_blocks", {}).get("used", 1) == 0)
        return m if ok else None
    wait_for(idle, 10, "the model to be ready and idle with no KV block in use")
    st = srv.status()
    check(st["totals"]["running"] == 0 and st["totals"]["waiting"] == 0, "totals not zero")
    srv.complete("probe", 2, model)
    for p in prompts:
        check(srv.complete(p, 8, model) == ref[p], f"greedy output of a cached prompt changed: {p[:30]}")
    live = {m["pid"] for m in srv.status()["models"] if m.get("pid", 0) > 0}
    time.sleep(0.1)
    left = [p for p in srv.pids - live if alive(p)]
    check(not left, f"orphan engines: {left}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keel", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=random.randrange(2**31))
    ap.add_argument("--out")
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    print(f"wedge scenarios: seed {a.seed}, rounds {a.rounds}, device {a.device}", flush=True)
    results = {"seed": a.seed, "rounds": a.rounds, "device": a.device, "scenarios": {}}
    srv = Server(a.keel, {"m": a.model}, ["--enable-fault-injection", "--pin", "m", "--step-deadline", str(DEADLINE_S),
                                           "--heartbeat-timeout", "3", "--unload-grace", "1", "--kv-blocks", "64",
                                           "--max-concurrent", "16"], a.device)
    ref = {p: srv.complete(p) for p in LONG + ["short one", "probe"]}

    def s1():
        for rd in range(a.rounds):
            p = LONG[rd % 6] + f" round {rd} {rnd.randrange(10**6)}"
            srv.inject(kind="slow-store", seconds=rnd.uniform(0.2, 0.8), count=50)
            first = wait_all([ends(REQ_S, srv.complete, p) for _ in range(2)])
            check(all(ok for ok, _ in first) and first[0][1] == first[1][1], f"first pair: {first}")
            time.sleep(rnd.uniform(0, 0.03))
            third = LONG[(rd + 1) % 6]
            second = wait_all([ends(REQ_S, srv.complete, p), ends(REQ_S, srv.complete, p), ends(REQ_S, srv.complete, third)])
            check(all(ok for ok, _ in second), f"second pair: {second}")
            check(second[0][1] == first[0][1] and second[1][1] == first[0][1], "a cached prefix changed the output")
            check(second[2][1] == ref[third], "the third request's output changed")
            srv.call("DELETE", "/debug/faults?model=m")
            settled(srv, ref, [LONG[0]])

    def s2():
        for rd in range(a.rounds):
            p = LONG[(rd + 2) % 6]
            for _ in range(8):
                check(ref[p].startswith(srv.complete(p, 1)), "prewarm token differs")
                time.sleep(rnd.uniform(0, 0.02))
            time.sleep(rnd.uniform(0.2, 1.0))
            t0 = time.time()
            check(srv.complete("short one") == ref["short one"], "probe output differs")
            check(time.time() - t0 < 5, "the probe after the idle gap was slow")
            settled(srv, ref, [p])

    def s3():
        for rd in range(a.rounds):
            for p in LONG + CHURN:
                srv.complete(p, 1)
            jobs = []
            for i in range(30):
                p = (f"fresh {i} {rnd.randrange(10**6)} " + TEXTS[i % 6] * 8) if i % 3 == 0 else LONG[i % 6]
                k = rnd.randint(0, 4)
                if k == 0:
                    jobs.append(ends(REQ_S, srv.stream, p, 200, abort_in=rnd.uniform(0, 0.015)))
                else:
                    jobs.append(ends(REQ_S, srv.stream, p, 200, abort_after=k))
            res = wait_all(jobs)
            check(all(ok for ok, _ in res), f"aborted streams failed: {[str(v) for ok, v in res if not ok][:3]}")
            settled(srv, ref, [LONG[0], LONG[3]])

    def s4():
        w = sum(os.path.getsize(os.path.join(a.model, f)) for f in os.listdir(a.model) if f.endswith(".safetensors"))
        cfg = json.load(open(os.path.join(a.model, "config.json")))
        hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        kv = 64 * 16 * cfg["num_hidden_layers"] * 2 * cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * hd * 4
        two = Server(a.keel, {"a": a.model, "b": a.model}, ["--memory-budget", str(int(1.5 * (w + kv))),
                                                             "--kv-blocks", "64", "--step-deadline", str(DEADLINE_S)],
                     a.device)
        try:
            ok = {"a": 0, "b": 0}
            for rd in range(a.rounds + 1):
                jobs, want = [], []
                for i in range(6):
                    mid = "a" if (i + rd) % 2 else "b"
                    time.sleep(rnd.uniform(0, 0.06))
                    jobs.append(ends(25, two.complete, LONG[i % 2], 6, mid))
                    want.append((mid, ref[LONG[i % 2]]))
                for (good, v), (mid, r) in zip(wait_all(jobs), want):
                    if good:
                        check(r.startswith(v), f"{mid}: output differs")
                        ok[mid] += 1
                    else:
                        check(re.match(r"(503|507) ", str(v)), f"unexpected failure: {v}")
            check(ok["a"] > 0 and ok["b"] > 0, f"both models served: {ok}")
            st = two.status()
            check(st["totals"]["memory_bytes"] <= st["totals"]["memory_budget_bytes"], "over budget")
            for mid in ("a", "b"):
                two.complete("probe", 2, mid)
            st = two.status()
            check(st["totals"]["running"] + st["totals"]["waiting"] == 0, "counts not zero")
            live = {m["pid"] for m in st["models"] if m.get("pid", 0) > 0}
            check(not [p for p in two.pids - live if alive(p)], "evicted engine alive")
        finally:
            results["scenarios"]["4-exit"] = two.stop()

    def s5():
        for rd in range(a.rounds):
            before = srv.model()
            jobs = [ends(REQ_S, srv.stream, LONG[i], 800) for i in range(4)] + \
                   [ends(REQ_S, srv.complete, LONG[4 + i]) for i in range(2)]
            time.sleep(rnd.uniform(0.02, 0.3))
            t0 = time.time()
            s, j = srv.call("POST", "/v1/models/m/unload")
            check(s == 200 and time.time() - t0 < 6, f"unload {s} in {time.time() - t0:.1f} s")
            res = wait_all(jobs)
            for ok, v in res:
                check(ok or "unload" in str(v), f"unexpected failure: {v}")
            check(not any(ok for ok, _ in res[:4]), "long streams survived an unload")
            wait_for(lambda: not alive(before["pid"]), 3, "the unloaded engine to be gone")
            check(srv.complete(LONG[0]) == ref[LONG[0]], "output after reload differs")
            check(srv.call("POST", "/v1/models/m/load")[0] == 200, "load")
            settled(srv, ref, [LONG[1]])

    def s6():
        kinds = [dict(kind="stall-step", seconds=0.5), dict(kind="ssd-write-error", count=5),
                 dict(kind="ssd-read-corrupt", count=5), dict(kind="slow-store", seconds=0.3, count=5),
                 dict(kind="crash-engine"), dict(kind="stall-step")]
        for rd in range(a.rounds):
            for f in kinds:
                destructive = f["kind"] == "crash-engine" or (f["kind"] == "stall-step" and "seconds" not in f)
                before = srv.model()
                jobs = [ends(REQ_S, srv.complete, LONG[i], 24) for i in range(6)] + [ends(REQ_S, srv.stream, LONG[0], 60)] + \
                       [ends(REQ_S, srv.complete, CHURN[(i + rd) % 6], 4) for i in range(3)]
                time.sleep(rnd.uniform(0, 0.04))
                srv.inject(**f)
                res = wait_all(jobs)
                if not destructive:
                    check(all(ok for ok, _ in res), f"{f}: {[str(v) for ok, v in res if not ok][:2]}")
                    for i in range(6):
                        check(res[i][1].startswith(ref[LONG[i]]), f"{f}: output changed")
                    for p in CHURN[:2]:
                        srv.complete(p, 4)
                    for p in LONG[:3]:
                        check(srv.complete(p) == ref[p], f"{f}: a restored prefix was served wrong")
                else:
                    for ok, v in res:
                        check(ok or re.search(r"stalled|exited|died|signal", str(v)), f"{f}: {v}")
                    try:
                        srv.complete("short one")
                    except RuntimeError:
                        pass
                    wait_for(lambda: (lambda m: m["state"] == "ready" and m["pid"] != before["pid"])(srv.model()),
                             20, f"restart after {f}")
                    check(not alive(before["pid"]), "the killed engine is still alive")
                srv.call("DELETE", "/debug/faults?model=m")
                settled(srv, ref, [LONG[rd % 6], "short one"])

    failed = 0
    for name, fn in [("1-slow-store-pairs", s1), ("2-prewarm-idle-probe", s2), ("3-aborts", s3),
                     ("4-two-models-budget", s4), ("5-unload-reload", s5), ("6-fault-kinds", s6)]:
        t0 = time.time()
        try:
            fn()
            verdict = "pass"
        except Exception as e:  # noqa: BLE001
            verdict = f"FAIL: {type(e).__name__}: {e}"
            failed += 1
        results["scenarios"][name] = {"verdict": verdict, "seconds": round(time.time() - t0, 2)}
        print(f"{name}: {verdict} ({time.time() - t0:.1f} s)", flush=True)
    m = srv.model()
    results["tiers"] = m.get("tiers")
    results["restarts"] = m.get("restarts")
    try:
        results["exit"] = srv.stop()
    except Failed as e:
        results["exit"] = f"FAIL: {e}"
        failed += 1
    print(json.dumps(results, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
