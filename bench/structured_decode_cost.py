# Structured-output decode overhead on the CPU (issue 17): one `keel serve MODEL`, then
# N rounds of two /v1/completions requests (256 tokens, ignore_eos, greedy): unconstrained,
# then under a JSON schema no request completes. Prints, per mode, the engine process's
# CPU milliseconds per token (utime + stime from /proc, steadier than wall time on a
# loaded machine) and tokens/s (median and max).
#   python3 bench/structured_decode_cost.py build/keel models/default 5
import json, os, subprocess, sys, time, urllib.request, statistics, re
keel, model = sys.argv[1], sys.argv[2]
srv = subprocess.Popen([keel, "serve", model, "--host", "127.0.0.1", "--port", "18733"],
                       stderr=subprocess.PIPE, text=True)
for line in srv.stderr:
    if "listening on" in line: break
schema = {"type":"array","minItems":100,"items":{"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer"}},"required":["name","age"]}}
def post(mode):
    body = {"model": os.path.basename(model.rstrip("/")), "prompt": "Hello", "max_tokens": 256, "ignore_eos": True, "temperature": 0}
    if mode == "json": body["structured_outputs"] = {"json": schema}
    req = urllib.request.Request("http://127.0.0.1:18733/v1/completions", json.dumps(body).encode(), {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req))
post("greedy")
engine = subprocess.check_output(["pgrep", "-P", str(srv.pid)]).split()[0].decode()
def ticks():
    f = open(f"/proc/{engine}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
res = {"greedy": [], "json": []}
for i in range(int(sys.argv[3])):
    for mode in ("greedy", "json"):
        t0, c0 = time.time(), ticks()
        r = post(mode)
        n = r["usage"]["completion_tokens"]
        res[mode].append(((ticks() - c0) * 10.0 / n, n / (time.time() - t0)))
srv.terminate(); srv.wait()
for m, v in res.items():
    print(m, "cpu ms/token median %.2f" % statistics.median(x[0] for x in v),
          "tok/s median %.1f max %.1f" % (statistics.median(x[1] for x in v), max(x[1] for x in v)), "n", len(v))
