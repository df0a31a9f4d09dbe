#!/usr/bin/env python3
"""Float64 reference of a GLM-4.5 (glm4_moe) multi-token-prediction layer, in plain Python
(standard library only), for tests/model/test_cpu_mtp_fixtures.cpp.

    keel make-model --arch glm4_moe --shape tiny --layers 2 --mtp-layers 1 --dtype f32 \
        --seed 7 --out /tmp/mtp_tiny
    python3 scripts/ref/mtp_fixtures.py /tmp/mtp_tiny > tests/fixtures/mtp/glm4_moe_tiny.json

Reads config.json and model.safetensors as saved (the header parsed with json + struct;
f32 or bf16) and computes, for the MTP layer stored as decoder layer num_hidden_layers:
for position t with the target's pre-norm hidden state h_t and the next token x_{t+1},
  e = enorm(embed(x_{t+1})) (zero at position 0, as vLLM / SGLang mask it),
  u = eh_proj([e ; hnorm(h_t)]), h' = decoder block(u) (attention over the MTP positions,
  q/k/v biases, q/k RMSNorm, partial neox rope; GLM's grouped sigmoid MoE with a shared
  expert), logits = shared_head.head(shared_head.norm(h')).
The inputs (tokens, hidden rows) are drawn from a fixed LCG and written with the outputs:
`rows` over positions 0..n-1, then `chain`: k steps from the last row, each feeding the
previous step's h' and argmax at the next position.
"""
import json
import math
import struct
import sys

N_ROWS = 6
CHAIN = 3


def load(model_dir):
    with open(model_dir + "/config.json") as f:
        cfg = json.load(f)
    with open(model_dir + "/model.safetensors", "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    base = 8 + hlen
    tensors = {}

    def get(name):
        if name in tensors:
            return tensors[name]
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
        else:
            raise SystemExit(name + ": dtype " + meta["dtype"] + " not handled")
        shape = meta["shape"]
        if len(shape) == 2:
            cols = shape[1]
            vals = [vals[r * cols:(r + 1) * cols] for r in range(shape[0])]
        tensors[name] = vals
        return vals

    return cfg, get


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


class Mtp:
    def __init__(self, cfg, get):
        self.cfg = cfg
        self.get = get
        L = cfg["num_hidden_layers"]
        self.p = "model.layers.%d." % L
        self.H = cfg["num_attention_heads"]
        self.G = cfg["num_key_value_heads"]
        self.D = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        self.eps = cfg["rms_norm_eps"]
        rot = int(self.D * cfg.get("partial_rotary_factor", 1.0))
        self.rot = rot
        theta = cfg.get("rope_theta", 10000.0)
        self.inv_freq = [1.0 / theta ** (2 * i / rot) for i in range(rot // 2)]
        self.keys, self.values = [], []  # per position: [G][D]
        self.embed = get(self.p + "embed_tokens.weight") or get("model.embed_tokens.weight")
        self.head = get(self.p + "shared_head.head.weight") or get("lm_head.weight")

    def w(self, name):
        t = self.get(self.p + name)
        if t is None:
            raise SystemExit("missing " + self.p + name)
        return t

    def rope(self, x, pos):
        half = self.rot // 2
        out = list(x)
        for i in range(half):
            c, s = math.cos(pos * self.inv_freq[i]), math.sin(pos * self.inv_freq[i])
            a, b = x[i], x[i + half]
            out[i] = a * c - b * s
            out[i + half] = b * c + a * s
        return out

    def moe(self, h):
        cfg = self.cfg
        E, k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
        ng, tg = cfg["n_group"], cfg["topk_group"]
        logits = matvec(self.w("mlp.gate.weight"), h)
        bias = self.w("mlp.gate.e_score_correction_bias")
        s = [1.0 / (1.0 + math.exp(-v)) for v in logits]
        choice = [s[e] + bias[e] for e in range(E)]
        per = E // ng
        if tg < ng:
            score = [sum(sorted(choice[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(ng)]
            keep = sorted(range(ng), key=lambda g: (-score[g], g))[:tg]
            choice = [choice[e] if e // per in keep else 0.0 for e in range(E)]
        ids = sorted(range(E), key=lambda e: (-choice[e], e))[:k]
        total = sum(s[e] for e in ids)
        y = [0.0] * len(h)
        for e in ids:
            wgt = (s[e] / (total + 1e-20) if cfg.get("norm_topk_prob", True) else s[e])
            wgt *= cfg["routed_scaling_factor"]
            q = "mlp.experts.%d." % e
            g = matvec(self.w(q + "gate_proj.weight"), h)
            u = matvec(self.w(q + "up_proj.weight"), h)
            d = matvec(self.w(q + "down_proj.weight"), [silu(a) * b for a, b in zip(g, u)])
            y = [a + wgt * b for a, b in zip(y, d)]
        g = matvec(self.w("mlp.shared_experts.gate_proj.weight"), h)
        u = matvec(self.w("mlp.shared_experts.up_proj.weight"), h)
        d = matvec(self.w("mlp.shared_experts.down_proj.weight"), [silu(a) * b for a, b in zip(g, u)])
        return [a + b for a, b in zip(y, d)]

    def step(self, pos, hidden, token):
        """One position; appends its K/V (positions must come in order)."""
        assert pos == len(self.keys)
        eps, H, G, D = self.eps, self.H, self.G, self.D
        emb = [0.0] * len(hidden) if pos == 0 else list(self.embed[token])
        e = rmsnorm(emb, self.w("enorm.weight"), eps)
        g = rmsnorm(hidden, self.w("hnorm.weight"), eps)
        x = matvec(self.w("eh_proj.weight"), e + g)
        h = rmsnorm(x, self.w("input_layernorm.weight"), eps)
        q = [a + b for a, b in zip(matvec(self.w("self_attn.q_proj.weight"), h),
                                   self.w("self_attn.q_proj.bias"))]
        k = [a + b for a, b in zip(matvec(self.w("self_attn.k_proj.weight"), h),
                                   self.w("self_attn.k_proj.bias"))]
        v = [a + b for a, b in zip(matvec(self.w("self_attn.v_proj.weight"), h),
                                   self.w("self_attn.v_proj.bias"))]
        qn, kn = self.get(self.p + "self_attn.q_norm.weight"), self.get(self.p + "self_attn.k_norm.weight")
        qh = [q[i * D:(i + 1) * D] for i in range(H)]
        kh = [k[i * D:(i + 1) * D] for i in range(G)]
        vh = [v[i * D:(i + 1) * D] for i in range(G)]
        if qn is not None:
            qh = [rmsnorm(a, qn, eps) for a in qh]
            kh = [rmsnorm(a, kn, eps) for a in kh]
        qh = [self.rope(a, pos) for a in qh]
        kh = [self.rope(a, pos) for a in kh]
        self.keys.append(kh)
        self.values.append(vh)
        att = []
        scale = 1.0 / math.sqrt(D)
        for i in range(H):
            gi = i // (H // G)
            sc = [sum(a * b for a, b in zip(qh[i], self.keys[j][gi])) * scale for j in range(pos + 1)]
            m = max(sc)
            ex = [math.exp(a - m) for a in sc]
            tot = sum(ex)
            o = [0.0] * D
            for j in range(pos + 1):
                wj = ex[j] / tot
                o = [a + wj * b for a, b in zip(o, self.values[j][gi])]
            att += o
        x = [a + b for a, b in zip(x, matvec(self.w("self_attn.o_proj.weight"), att))]
        h = rmsnorm(x, self.w("post_attention_layernorm.weight"), eps)
        x = [a + b for a, b in zip(x, self.moe(h))]
        logits = matvec(self.head, rmsnorm(x, self.w("shared_head.norm.weight"), eps))
        best = max(range(len(logits)), key=lambda i: (logits[i], -i))
        return x, logits, best


def main():
    cfg, get = load(sys.argv[1])
    mtp = Mtp(cfg, get)
    hidden_size, vocab = cfg["hidden_size"], cfg["vocab_size"]
    rng = Lcg(20261206)
    tokens = [rng.next() % vocab for _ in range(N_ROWS)]
    hidden = [[rng.uniform() * 2.0 for _ in range(hidden_size)] for _ in range(N_ROWS)]
    rows = []
    for t in range(N_ROWS):
        x, logits, best = mtp.step(t, hidden[t], tokens[t])
        rows.append({"argmax": best, "logits": logits, "hidden_out": x})
    chain = []
    h, tok = rows[-1]["hidden_out"], rows[-1]["argmax"]
    for i in range(CHAIN):
        h, logits, tok = mtp.step(N_ROWS + i, h, tok)
        chain.append({"argmax": tok, "logits": logits})
    out = {
        "make_model": {"arch": "glm4_moe", "shape": "tiny", "layers": 2, "mtp_layers": 1,
                       "dtype": "f32", "seed": 7},
        "tokens": tokens,
        "hidden": hidden,
        "rows": [{"argmax": r["argmax"], "logits": [round(v, 9) for v in r["logits"]]} for r in rows],
        "chain": [{"argmax": c["argmax"], "logits": [round(v, 9) for v in c["logits"]]} for c in chain],
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
