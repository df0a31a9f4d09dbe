#!/usr/bin/env python3
"""Float64 reference of an EAGLE-3 draft head (vLLM's / SGLang's llama_eagle3), in plain
Python (standard library only), for tests/model/test_cpu_eagle3_fixtures.cpp.

    keel make-model --arch llama --shape tiny --dtype f32 --seed 3 --out /tmp/e3_target
    keel make-model --eagle3-for /tmp/e3_target --seed 7 --out /tmp/e3_head
    python3 scripts/ref/eagle3_fixtures.py /tmp/e3_head /tmp/e3_target 3 7 \
        > tests/fixtures/eagle3/llama_tiny.json

Reads the head's config.json and model.safetensors (f32 / bf16 matrices, I64 d2t) and,
when the head stores no embed_tokens.weight, the target's model.embed_tokens.weight. For
position t, with the target's aux rows a_t (the outputs of the target layers
eagle_config.eagle_aux_hidden_state_layer_ids, concatenated in that order) and the next
token x_{t+1}:
  g = fc(a_t)                       (a chained position: g = the previous position's h')
  e = input_layernorm(embed(x_{t+1})),  n = hidden_norm(g)
  r = g (hidden_norm(g) with norm_before_residual)
  x = o_proj(attention(rope(q, k, v of [e ; n]))) + r  (causal, over the head's positions;
      llama's rotate-half rope, GQA)
  h' = x + down(silu(gate(p)) * up(p)),  p = post_attention_layernorm(x)
  logits = lm_head(norm(h')) over the draft vocabulary; argmax d -> target id d + d2t[d].
The inputs (tokens, aux rows) come from a fixed LCG and are written with the outputs:
`rows` over positions 0..n-1, then `chain`: k steps from the last row, each feeding the
previous step's h' and target-id guess at the next position.
"""
import json
import math
import struct
import sys

N_ROWS = 6
CHAIN = 3


def load(path):
    with open(path + "/model.safetensors", "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    base = 8 + hlen

    def get(name):
        if name not in header:
            return None
        meta = header[name]
        a, b = meta["data_offsets"]
        raw = data[base + a:base + b]
        if meta["dtype"] == "F32":
            vals = list(struct.unpack("<%df" % (len(raw) // 4), raw))
        elif meta["dtype"] == "BF16":
            hs = struct.unpack("<%dH" % (len(raw) // 2), raw)
            vals = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in hs]
        elif meta["dtype"] == "I64":
            vals = list(struct.unpack("<%dq" % (len(raw) // 8), raw))
        else:
            raise SystemExit(name + ": dtype " + meta["dtype"] + " not handled")
        shape = meta["shape"]
        if len(shape) == 2:
            cols = shape[1]
            vals = [vals[r * cols:(r + 1) * cols] for r in range(shape[0])]
        return vals

    return get


def rmsnorm(x, w, eps):
    ms = sum(v * v for v in x) / len(x)
    r = 1.0 / math.sqrt(ms + eps)
    return [v * r * wi for v, wi in zip(x, w)]


def matvec(w, x):
    return [sum(a * b for a, b in zip(row, x)) for row in w]


def silu(v):
    return v / (1.0 + math.exp(-v))


class Lcg:
    def __init__(self, seed):
        self.s = seed

    def next(self):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return self.s >> 11

    def uniform(self):  # [-1, 1), 6 decimals so that the JSON holds it exactly as used
        return round((self.next() / float(1 << 53)) * 2.0 - 1.0, 6)


class Eagle3:
    def __init__(self, cfg, get, target_get):
        self.cfg = cfg
        self.eps = cfg["rms_norm_eps"]
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.g = cfg.get("num_key_value_heads", self.nh)
        self.d = cfg.get("head_dim") or self.H // self.nh
        self.theta = cfg.get("rope_theta", 10000.0)
        self.norm_before_residual = cfg.get("norm_before_residual", False)
        w = {}
        for name in ["fc.weight", "midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
                     "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
                     "midlayer.self_attn.v_proj.weight", "midlayer.self_attn.o_proj.weight",
                     "midlayer.post_attention_layernorm.weight", "midlayer.mlp.gate_proj.weight",
                     "midlayer.mlp.up_proj.weight", "midlayer.mlp.down_proj.weight",
                     "norm.weight", "lm_head.weight", "d2t"]:
            w[name] = get(name)
            if w[name] is None:
                raise SystemExit(name + ": missing")
        w["embed"] = get("embed_tokens.weight") or target_get("model.embed_tokens.weight")
        self.w = w
        self.keys, self.values = [], []  # per position: [g][d]

    def rope(self, x, pos):
        half = self.d // 2
        out = list(x)
        for i in range(half):
            freq = self.theta ** (-2.0 * i / self.d)
            c, s = math.cos(pos * freq), math.sin(pos * freq)
            a, b = x[i], x[i + half]
            out[i] = a * c - b * s
            out[i + half] = b * c + a * s
        return out

    def step(self, pos, feat, token, chained=False):
        w, H, d = self.w, self.H, self.d
        g = feat if chained else matvec(w["fc.weight"], feat)
        e = rmsnorm(w["embed"][token], w["midlayer.input_layernorm.weight"], self.eps)
        n = rmsnorm(g, w["midlayer.hidden_norm.weight"], self.eps)
        r = n if self.norm_before_residual else g
        cat = e + n
        q = matvec(w["midlayer.self_attn.q_proj.weight"], cat)
        k = matvec(w["midlayer.self_attn.k_proj.weight"], cat)
        v = matvec(w["midlayer.self_attn.v_proj.weight"], cat)
        qs = [self.rope(q[h * d:(h + 1) * d], pos) for h in range(self.nh)]
        ks = [self.rope(k[h * d:(h + 1) * d], pos) for h in range(self.g)]
        vs = [v[h * d:(h + 1) * d] for h in range(self.g)]
        del self.keys[pos:], self.values[pos:]
        self.keys.append(ks)
        self.values.append(vs)
        att = []
        for h in range(self.nh):
            kvh = h // (self.nh // self.g)
            scores = [sum(a * b for a, b in zip(qs[h], self.keys[j][kvh])) / math.sqrt(d)
                      for j in range(pos + 1)]
            m = max(scores)
            ex = [math.exp(s - m) for s in scores]
            tot = sum(ex)
            o = [0.0] * d
            for j in range(pos + 1):
                for i in range(d):
                    o[i] += ex[j] / tot * self.values[j][kvh][i]
            att += o
        x = [a + b for a, b in zip(matvec(w["midlayer.self_attn.o_proj.weight"], att), r)]
        p = rmsnorm(x, w["midlayer.post_attention_layernorm.weight"], self.eps)
        gate = matvec(w["midlayer.mlp.gate_proj.weight"], p)
        up = matvec(w["midlayer.mlp.up_proj.weight"], p)
        act = [silu(a) * b for a, b in zip(gate, up)]
        x = [a + b for a, b in zip(x, matvec(w["midlayer.mlp.down_proj.weight"], act))]
        logits = matvec(w["lm_head.weight"], rmsnorm(x, w["norm.weight"], self.eps))
        best = max(range(len(logits)), key=lambda i: logits[i])
        return x, logits, best + w["d2t"][best]


def main():
    """eagle3_fixtures.py HEAD_DIR TARGET_DIR TARGET_SEED HEAD_SEED: the seeds are
    make-model's (recorded for the test to make the same files)."""
    head_dir, target_dir = sys.argv[1], sys.argv[2]
    target_seed, head_seed = int(sys.argv[3]), int(sys.argv[4])
    with open(head_dir + "/config.json") as f:
        cfg = json.load(f)
    with open(target_dir + "/config.json") as f:
        target_cfg = json.load(f)
    head = Eagle3(cfg, load(head_dir), load(target_dir))
    width = len(head.w["fc.weight"][0])
    rng = Lcg(20261206)
    tokens = [rng.next() % cfg["vocab_size"] for _ in range(N_ROWS)]
    aux = [[rng.uniform() * 2.0 for _ in range(width)] for _ in range(N_ROWS)]
    rows = []
    for t in range(N_ROWS):
        x, logits, best = head.step(t, aux[t], tokens[t])
        rows.append({"argmax": best, "logits": logits, "hidden_out": x})
    chain = []
    h, tok = rows[-1]["hidden_out"], rows[-1]["argmax"]
    for i in range(CHAIN):
        h, logits, tok = head.step(N_ROWS + i, h, tok, chained=True)
        chain.append({"argmax": tok, "logits": logits, "hidden_out": h})

    def r9(v):
        return [round(x, 9) for x in v]

    out = {
        "make_model": {"arch": target_cfg["model_type"], "shape": "tiny", "dtype": "f32",
                       "seed": target_seed, "eagle3_seed": head_seed},
        "tokens": tokens,
        "aux": aux,
        "rows": [{"argmax": r["argmax"], "logits": r9(r["logits"]), "hidden_out": r9(r["hidden_out"])}
                 for r in rows],
        "chain": [{"argmax": c["argmax"], "logits": r9(c["logits"]), "hidden_out": r9(c["hidden_out"])}
                  for c in chain],
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
