#!/usr/bin/env python3
"""Float64 reference of a multi-token-prediction layer, GLM-4.5's (glm4_moe) or DeepSeek-V3's
(deepseek_v3), in plain Python (standard library only), for
tests/model/test_cpu_mtp_fixtures.cpp.

    keel make-model --arch glm4_moe --shape tiny --layers 2 --mtp-layers 1 --dtype f32 \
        --seed 7 --out /tmp/mtp_tiny
    python3 scripts/ref/mtp_fixtures.py /tmp/mtp_tiny 7 > tests/fixtures/mtp/glm4_moe_tiny.json
    keel make-model --arch deepseek_v3 --shape tiny --layers 2 --mtp-layers 1 --dtype f32 \
        --seed 5 --out /tmp/mtp_ds
    python3 scripts/ref/mtp_fixtures.py /tmp/mtp_ds 5 '{"rope_theta": 100.0, "rope_scaling":
        {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64,
         "beta_fast": 32, "beta_slow": 1, "mscale": 40.0, "mscale_all_dim": 20.0}}' \
        > tests/fixtures/mtp/deepseek_v3_tiny.json
    keel make-model --arch deepseek_v3 --shape tiny --layers 2 --mtp-layers 1 --dtype f32 \
        --q-lora-rank 0 --seed 9 --out /tmp/mtp_dsq
    python3 scripts/ref/mtp_fixtures.py /tmp/mtp_dsq 9 '{"rope_interleave": false,
        "rope_theta": 100.0, "rope_scaling": {"type": "yarn", "factor": 16.0,
        "original_max_position_embeddings": 32, "mscale": 30.0, "mscale_all_dim": 20.0}}' \
        > tests/fixtures/mtp/deepseek_v3_noqlora_tiny.json
    keel make-model --arch glm_moe_dsa --shape tiny --layers 2 --mtp-layers 1 --dtype f32 \
        --seed 13 --out /tmp/mtp_dsa
    python3 scripts/ref/mtp_fixtures.py /tmp/mtp_dsa 13 '{"index_topk": 3, "rope_theta": 100.0,
        "rope_scaling": {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64,
        "beta_fast": 32, "beta_slow": 1, "mscale": 40.0, "mscale_all_dim": 20.0}}' \
        > tests/fixtures/mtp/glm_moe_dsa_tiny.json
(The overrides exaggerate YaRN's attention factor and mscale and the rope's speed so that
the attention, which random tiny weights leave nearly uniform, moves the logits: a wrong
rope style or a missing scale fails the 1e-4 check by about 100x.)

Reads config.json and model.safetensors as saved (the header parsed with json + struct;
f32 or bf16), except the target's final norm: make-model writes model.norm.weight as ones,
under which RMSNorm barely moves a unit-RMS row, so the reference draws its own weights
(0.5..1.5, from the fixed LCG, f32-exact) and records them as `final_norm`; the test
writes them into model.norm.weight before it opens the model. It computes, for the MTP
layer stored as decoder layer num_hidden_layers: for position t with the target's last
hidden state h_t (before the final norm, as the runner returns it) and the next token
x_{t+1},
  e = enorm(embed(x_{t+1})) (zero at position 0, as vLLM / SGLang mask it),
  g = hnorm(model.norm(h_t)) (the MTP layer reads what the target's LM head reads, as
  vLLM, SGLang and Megatron give it),
  u = eh_proj([e ; g]), h' = decoder block(u) (attention over the MTP positions:
  GLM's q/k/v biases, q/k RMSNorm, partial neox rope; or DeepSeek-V3's multi-head latent
  attention as transformers computes it, keys and values expanded through kv_b_proj, not
  absorbed: q via q_a / q_a_layernorm / q_b or q_proj, kv_a_proj_with_mqa, kv_a_layernorm,
  a decoupled rope part, interleaved with rope_interleave, YaRN with mscale when the config
  has rope_scaling; with GLM-5's DeepSeek Sparse Attention (index_topk) the layer's own
  indexer scores the MTP positions so far, score(t, s) = sum_h w_h relu(q_h . k_s / sqrt(Di)),
  q_h = rope(indexer.wq_b(q latent, normed)), k_s = rope(LayerNorm(indexer.wk h_s)) (eps
  1e-6, with its bias; the rope over the first qk_rope_head_dim values), w =
  indexer.weights_proj h / sqrt(Hi), and each query attends only to the index_topk best,
  ties to the earlier position (all positions while there are no more than index_topk; the
  override index_topk 3 makes most positions select); then the grouped sigmoid MoE with e_score_correction_bias,
  norm_topk_prob, routed_scaling_factor and shared experts),
  logits = shared_head.head(shared_head.norm(h')).
The inputs (tokens, hidden rows) are drawn from a fixed LCG and written with the outputs:
`rows` over positions 0..n-1, then `chain`: k steps from the last row, each feeding the
previous step's h' and argmax at the next position (g = hnorm(h'), no model.norm: vLLM
chains its MTP layer's output so).
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


def f32(v):
    """v rounded to float32, as the test stores it."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


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


def yarn_get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


class MlaRope:
    """transformers' DeepseekV3 rotary embedding over qk_rope_head_dim: default or YaRN
    frequencies (with its attention factor on cos / sin); pairs (2i, 2i + 1) with
    rope_interleave (transformers de-interleaves q and k alike, which leaves their dot
    products as rotating those pairs), halves otherwise."""

    def __init__(self, cfg):
        d = cfg["qk_rope_head_dim"]
        theta = cfg.get("rope_theta", 10000.0)
        self.d = d
        # transformers' GLM-5 (and its indexer) always rotate pairs, whatever the config says.
        self.interleave = cfg.get("rope_interleave", True) or cfg["model_type"] == "glm_moe_dsa"
        pos_freq = [theta ** (2 * i / d) for i in range(d // 2)]
        self.inv_freq = [1.0 / f for f in pos_freq]
        self.att = 1.0
        rs = cfg.get("rope_scaling")
        if rs and rs.get("type", rs.get("rope_type")) == "yarn":
            factor = rs["factor"]
            orig = rs["original_max_position_embeddings"]
            fast, slow = rs.get("beta_fast", 32), rs.get("beta_slow", 1)

            def corr(rot):
                return d * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

            low, high = corr(fast), corr(slow)
            if rs.get("truncate", True):
                low, high = math.floor(low), math.ceil(high)
            low, high = max(low, 0), min(high, d - 1)
            if low == high:
                high += 0.001
            for i in range(d // 2):
                ramp = min(max((i - low) / (high - low), 0.0), 1.0)
                extrap = 1.0 - ramp
                self.inv_freq[i] = (1.0 / (factor * pos_freq[i])) * (1 - extrap) + (1.0 / pos_freq[i]) * extrap
            if "mscale" in rs and "mscale_all_dim" in rs:
                self.att = yarn_get_mscale(factor, rs["mscale"]) / yarn_get_mscale(factor, rs["mscale_all_dim"])
            else:
                self.att = yarn_get_mscale(factor)

    def __call__(self, x, pos):
        out = list(x)
        for i in range(self.d // 2):
            c = math.cos(pos * self.inv_freq[i]) * self.att
            s = math.sin(pos * self.inv_freq[i]) * self.att
            a, b = (2 * i, 2 * i + 1) if self.interleave else (i, i + self.d // 2)
            out[a] = x[a] * c - x[b] * s
            out[b] = x[b] * c + x[a] * s
        return out


class Mtp:
    def __init__(self, cfg, get, final_norm):
        self.cfg = cfg
        self.final_norm = final_norm  # the target's model.norm.weight
        self.get = get
        L = cfg["num_hidden_layers"]
        self.p = "model.layers.%d." % L
        self.mla = cfg.get("kv_lora_rank") is not None
        if self.mla:
            self.mla_rope = MlaRope(cfg)
            qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
            self.scaling = qk ** -0.5
            rs = cfg.get("rope_scaling")
            if rs and rs.get("mscale_all_dim"):
                m = yarn_get_mscale(rs["factor"], rs["mscale_all_dim"])
                self.scaling *= m * m
        self.H = cfg["num_attention_heads"]
        self.G = cfg.get("num_key_value_heads", self.H)
        self.D = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        self.eps = cfg["rms_norm_eps"]
        rot = int(self.D * cfg.get("partial_rotary_factor", 1.0))
        self.rot = rot
        theta = cfg.get("rope_theta", 10000.0)
        self.inv_freq = [1.0 / theta ** (2 * i / rot) for i in range(rot // 2)]
        self.keys, self.values = [], []  # per position: [G][D]
        self.index_keys = []  # per position: the DSA indexer's key
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

    def gqa_attention(self, pos, h):
        eps, H, G, D = self.eps, self.H, self.G, self.D
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
        for i in range(H):
            att += self.attend(qh[i], i // (H // G), 1.0 / math.sqrt(D))
        return att

    def attend(self, q, head, scale, keep=None):
        """softmax(q . k_j * scale) over the positions j so far (those in `keep` when given),
        times their values."""
        js = keep if keep is not None else range(len(self.keys))
        keys = [self.keys[j][head] for j in js]
        values = [self.values[j][head] for j in js]
        sc = [sum(a * b for a, b in zip(q, k)) * scale for k in keys]
        m = max(sc)
        ex = [math.exp(a - m) for a in sc]
        tot = sum(ex)
        o = [0.0] * len(values[0])
        for e, v in zip(ex, values):
            o = [a + (e / tot) * b for a, b in zip(o, v)]
        return o

    def mla_attention(self, pos, h):
        """transformers' DeepseekV3Attention for one position; appends its expanded key and
        value per head."""
        cfg, eps, H = self.cfg, self.eps, self.H
        nope, rope, vd, R = (cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"],
                             cfg["kv_lora_rank"])
        qk = nope + rope
        qa = None
        if cfg.get("q_lora_rank"):
            qa = rmsnorm(matvec(self.w("self_attn.q_a_proj.weight"), h),
                         self.w("self_attn.q_a_layernorm.weight"), eps)
            q = matvec(self.w("self_attn.q_b_proj.weight"), qa)
        else:
            q = matvec(self.w("self_attn.q_proj.weight"), h)
        keep = self.dsa_select(pos, h, qa) if cfg.get("index_topk") else None
        ckv = matvec(self.w("self_attn.kv_a_proj_with_mqa.weight"), h)
        c = rmsnorm(ckv[:R], self.w("self_attn.kv_a_layernorm.weight"), eps)
        k_pe = self.mla_rope(ckv[R:], pos)
        kv = matvec(self.w("self_attn.kv_b_proj.weight"), c)  # [H, nope + v]
        keys, values = [], []
        for i in range(H):
            blk = kv[i * (nope + vd):(i + 1) * (nope + vd)]
            keys.append(blk[:nope] + k_pe)
            values.append(blk[nope:])
        self.keys.append(keys)
        self.values.append(values)
        att = []
        for i in range(H):
            qh = q[i * qk:(i + 1) * qk]
            qh = qh[:nope] + self.mla_rope(qh[nope:], pos)
            att += self.attend(qh, i, self.scaling, keep)
        return att

    def dsa_select(self, pos, h, qa):
        """The positions the query at `pos` keeps (appends its own index key first)."""
        cfg = self.cfg
        Hi, Di, topk = cfg["index_n_heads"], cfg["index_head_dim"], cfg["index_topk"]
        r = cfg["qk_rope_head_dim"]
        k = matvec(self.w("self_attn.indexer.wk.weight"), h)
        mean = sum(k) / Di
        var = sum((v - mean) ** 2 for v in k) / Di
        inv = 1.0 / math.sqrt(var + 1e-6)
        k = [(v - mean) * inv * a + b for v, a, b in
             zip(k, self.w("self_attn.indexer.k_norm.weight"), self.w("self_attn.indexer.k_norm.bias"))]
        self.index_keys.append(self.mla_rope(k[:r], pos) + k[r:])
        if pos + 1 <= topk:
            return None
        q = matvec(self.w("self_attn.indexer.wq_b.weight"), qa)
        qh = [q[i * Di:(i + 1) * Di] for i in range(Hi)]
        qh = [self.mla_rope(a[:r], pos) + a[r:] for a in qh]
        w = [v / math.sqrt(Hi) for v in matvec(self.w("self_attn.indexer.weights_proj.weight"), h)]
        score = []
        for key in self.index_keys:
            score.append(sum(w[i] * max(0.0, sum(a * b for a, b in zip(qh[i], key)) / math.sqrt(Di))
                             for i in range(Hi)))
        return sorted(sorted(range(pos + 1), key=lambda j: (-score[j], j))[:topk])

    def step(self, pos, hidden, token, chained=False):
        """One position; appends its K/V (positions must come in order). `hidden` is the
        target's row before its final norm, or with `chained` the layer's own h'."""
        assert pos == len(self.keys)
        eps = self.eps
        emb = [0.0] * len(hidden) if pos == 0 else list(self.embed[token])
        e = rmsnorm(emb, self.w("enorm.weight"), eps)
        if not chained:
            hidden = rmsnorm(hidden, self.final_norm, eps)
        g = rmsnorm(hidden, self.w("hnorm.weight"), eps)
        x = matvec(self.w("eh_proj.weight"), e + g)
        h = rmsnorm(x, self.w("input_layernorm.weight"), eps)
        att = self.mla_attention(pos, h) if self.mla else self.gqa_attention(pos, h)
        x = [a + b for a, b in zip(x, matvec(self.w("self_attn.o_proj.weight"), att))]
        h = rmsnorm(x, self.w("post_attention_layernorm.weight"), eps)
        x = [a + b for a, b in zip(x, self.moe(h))]
        logits = matvec(self.head, rmsnorm(x, self.w("shared_head.norm.weight"), eps))
        best = max(range(len(logits)), key=lambda i: (logits[i], -i))
        return x, logits, best


def main():
    """mtp_fixtures.py MODEL_DIR SEED [CONFIG_OVERRIDES_JSON]: SEED is make-model's (recorded
    for the test to make the same files); the overrides are merged into config.json's
    values here and by the test before it opens the model."""
    cfg, get = load(sys.argv[1])
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    overrides = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    cfg.update(overrides)
    hidden_size, vocab = cfg["hidden_size"], cfg["vocab_size"]
    rng = Lcg(20261206)
    tokens = [rng.next() % vocab for _ in range(N_ROWS)]
    hidden = [[rng.uniform() * 2.0 for _ in range(hidden_size)] for _ in range(N_ROWS)]
    final_norm = [f32(1.0 + 0.5 * rng.uniform()) for _ in range(hidden_size)]
    mtp = Mtp(cfg, get, final_norm)
    rows = []
    for t in range(N_ROWS):
        x, logits, best = mtp.step(t, hidden[t], tokens[t])
        rows.append({"argmax": best, "logits": logits, "hidden_out": x})
    chain = []
    h, tok = rows[-1]["hidden_out"], rows[-1]["argmax"]
    for i in range(CHAIN):
        h, logits, tok = mtp.step(N_ROWS + i, h, tok, chained=True)
        chain.append({"argmax": tok, "logits": logits})
    out = {
        "make_model": {"arch": cfg["model_type"], "shape": "tiny", "layers": cfg["num_hidden_layers"],
                       "mtp_layers": cfg["num_nextn_predict_layers"], "dtype": "f32", "seed": seed},
    }
    if cfg.get("kv_lora_rank") is not None and cfg.get("q_lora_rank") is None:
        out["make_model"]["q_lora_rank"] = 0  # --q-lora-rank 0: a plain q_proj
    if overrides:
        out["config_overrides"] = overrides
    out.update({
        "tokens": tokens,
        "hidden": hidden,
        "final_norm": final_norm,
        "rows": [{"argmax": r["argmax"], "logits": [round(v, 9) for v in r["logits"]]} for r in rows],
        "chain": [{"argmax": c["argmax"], "logits": [round(v, 9) for v in c["logits"]]} for c in chain],
    })
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
