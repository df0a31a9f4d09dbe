#!/usr/bin/env python3
"""Builds tiny random mixture-of-experts models with HF transformers and records their
float64 reference outputs, for keel's model tests (tests/model/).

Run on a machine with torch + transformers (the GPU machine; everything runs on its CPU
in float64 so that no TF32 or reduced-precision path touches the reference):

    OUT=/some/dir python3 scripts/ref/moe_fixtures.py

It writes $OUT/moe_models/<name>/ for every variant (config.json + model.safetensors in
the layout the released checkpoints use, and reference.json) and
$OUT/moe_models/summary.json (versions, which classes exist, the tensor names each model
saved, errors). Copy $OUT/moe_models to tests/fixtures/moe_models, where
tests/model/test_cpu_moe_fixtures.cpp finds them (and skips the ones that are absent).
It exits non-zero when any variant failed.

transformers 5 runs experts through an "experts implementation" (grouped_mm by default,
which takes only bf16/f16 matrices); every model here is switched to the "eager"
per-expert loop (from_pretrained(experts_implementation="eager") and
set_experts_implementation), which runs in float64.

Differences from model_fixtures.py (the dense models):
  * the reference is the saved model re-loaded and run in float64;
  * transformers 5 keeps experts fused in memory (mlp.experts.gate_up_proj [E, 2I, H]);
    whatever save_pretrained writes, per-expert checkpoints (Qwen3-MoE, Mixtral,
    GLM-4.5) are rewritten to the released per-expert names and re-loaded from them;
  * routers get larger weights so that top-k choices are far from ties, and
    reference.json["routing"] records, per MoE layer, how many tokens each expert took,
    how many experts were used, and the smallest gap between the last chosen and the
    first unchosen score over all tokens run (a seed whose gap is below MIN_GAP, or
    whose routing uses fewer than MIN_EXPERTS_USED of a layer's experts, is replaced by
    the next; a variant that never gets there fails).
"""
import copy
import json
import math
import os
import re
import sys
import tempfile
import traceback

import torch
import transformers

V5 = int(transformers.__version__.split(".")[0]) >= 5
GREEDY_STEPS = 12
TOP_N = 5
MIN_GAP = 1e-4
PROMPT_LENS = (5, 16, 37)
MIN_EXPERTS_USED = 0.75  # of a layer's experts, over all tokens run

COMMON = dict(vocab_size=320, hidden_size=64, max_position_embeddings=256, rms_norm_eps=1e-5,
              bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)


def cls(name):
    return getattr(transformers, name, None)


def variants():
    """(name, config class, model class, kwargs, rope, dtypes, layout)."""
    out = []
    qwen = dict(intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8,
                num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                mlp_only_layers=[1], use_sliding_window=False, attention_bias=False)
    out.append(("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", qwen,
                dict(rope_type="default", rope_theta=1000000.0), ["f32", "bf16"], "per_expert"))
    qwen_nonorm = dict(qwen, norm_topk_prob=False, num_experts_per_tok=3, mlp_only_layers=[],
                       num_hidden_layers=2)
    out.append(("qwen3_moe_nonorm", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", qwen_nonorm,
                dict(rope_type="default", rope_theta=1000000.0), ["f32"], "per_expert"))
    out.append(("mixtral", "MixtralConfig", "MixtralForCausalLM",
                dict(intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, num_local_experts=8,
                     num_experts_per_tok=2, sliding_window=None),
                dict(rope_type="default", rope_theta=1000000.0), ["f32"], "mixtral"))
    out.append(("gpt_oss", "GptOssConfig", "GptOssForCausalLM",
                dict(intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, num_local_experts=8,
                     num_experts_per_tok=2, sliding_window=8,
                     layer_types=["sliding_attention", "full_attention"], swiglu_limit=7.0,
                     attention_bias=True),
                dict(rope_type="yarn", rope_theta=150000.0, factor=4.0,
                     original_max_position_embeddings=64, beta_fast=32.0, beta_slow=1.0,
                     truncate=False),
                ["f32", "bf16"], "fused"))
    out.append(("glm4_moe", "Glm4MoeConfig", "Glm4MoeForCausalLM",
                dict(intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                     partial_rotary_factor=0.5, n_routed_experts=8, n_shared_experts=1,
                     num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1,
                     norm_topk_prob=True, routed_scaling_factor=2.5, use_qk_norm=True,
                     attention_bias=True, num_nextn_predict_layers=0),
                dict(rope_type="default", rope_theta=1000000.0), ["f32", "bf16"], "per_expert"))
    # No q/k norm or attention bias, two shared experts, no dense layer, four groups of
    # which two are kept, weights not renormalized.
    out.append(("glm4_moe_nonorm", "Glm4MoeConfig", "Glm4MoeForCausalLM",
                dict(intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                     partial_rotary_factor=0.5, n_routed_experts=8, n_shared_experts=2,
                     num_experts_per_tok=3, n_group=4, topk_group=2, first_k_dense_replace=0,
                     norm_topk_prob=False, routed_scaling_factor=1.5, use_qk_norm=False,
                     attention_bias=False, num_nextn_predict_layers=0),
                dict(rope_type="default", rope_theta=10000.0), ["f32"], "per_expert"))
    return out


def make_config(cfg_cls, kwargs, rope):
    kw = dict(COMMON)
    kw.update(kwargs)
    if V5:
        kw["rope_parameters"] = dict(rope)
        if "partial_rotary_factor" in kwargs:  # v5 reads it from rope_parameters
            kw["rope_parameters"]["partial_rotary_factor"] = kwargs["partial_rotary_factor"]
    else:
        kw["rope_theta"] = rope["rope_theta"]
        scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
        kw["rope_scaling"] = None if scaling["rope_type"] == "default" else scaling
    cfg = cfg_cls(**kw)
    for attr in ("_attn_implementation", "_experts_implementation"):
        try:
            setattr(cfg, attr, "eager")
        except Exception:
            pass
    return cfg


def eager(model):
    """Switches a model to the eager attention and per-expert loop (float64-safe)."""
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation("eager")
        except Exception as e:  # the config attribute below still selects the loop
            print("set_experts_implementation:", type(model).__name__, e, flush=True)
    if hasattr(model, "set_attn_implementation"):
        try:
            model.set_attn_implementation("eager")
        except Exception:
            pass
    for attr in ("_attn_implementation", "_experts_implementation"):
        try:
            setattr(model.config, attr, "eager")
        except Exception:
            pass
    return model


def init_weights(model, cfg, seed):
    """O(1) activations, peaked logits, and routers far from ties."""
    g = torch.Generator().manual_seed(seed)
    hidden = cfg.hidden_size
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias") or name.endswith("_bias") or name.endswith("sinks"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "lm_head" in name:
                p.copy_(3.0 / math.sqrt(hidden) * torch.randn(p.shape, generator=g))
            elif name.endswith("mlp.gate.weight") or name.endswith("mlp.router.weight") or \
                    name.endswith("block_sparse_moe.gate.weight"):
                p.copy_(3.0 / math.sqrt(hidden) * torch.randn(p.shape, generator=g))
            elif "experts" in name and p.dim() == 3:
                # fused [E, out, in] (qwen/glm/mixtral in transformers 5) or gpt-oss's
                # [E, in, out]: scale by the input width either way.
                fan_in = hidden if (name.endswith("gate_up_proj") and p.shape[1] == hidden) \
                    else p.shape[-1]
                if name.endswith("down_proj") and p.shape[2] == hidden:
                    fan_in = p.shape[1]
                p.copy_(1.0 / math.sqrt(fan_in) * torch.randn(p.shape, generator=g))
            else:  # linear [out, in]
                p.copy_(1.0 / math.sqrt(p.shape[-1]) * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def rewrite_experts(d, layout, cfg):
    """Rewrites fused expert tensors to the released per-expert names (in place)."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(d, "model.safetensors")
    sd = load_file(path)
    saved_names = sorted(sd.keys())
    if layout == "fused":
        return saved_names
    out = {}
    for k, v in sd.items():
        m = re.match(r"(model\.layers\.\d+\.)(mlp|block_sparse_moe)\.experts\.(gate_up_proj|down_proj)$", k)
        if not m:
            if layout == "mixtral":
                k = k.replace(".mlp.gate.weight", ".block_sparse_moe.gate.weight")
                k = re.sub(r"\.mlp\.experts\.(\d+)\.", r".block_sparse_moe.experts.\1.", k)
            out[k] = v
            continue
        pre, which = m.group(1), m.group(3)
        E = v.shape[0]
        for e in range(E):
            if which == "gate_up_proj":  # [E, 2I, H]: gate rows, then up rows
                I = v.shape[1] // 2
                parts = {"gate_proj": v[e, :I], "up_proj": v[e, I:]}
            else:  # [E, H, I]
                parts = {"down_proj": v[e]}
            for pn, t in parts.items():
                if layout == "mixtral":
                    wn = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}[pn]
                    out[f"{pre}block_sparse_moe.experts.{e}.{wn}.weight"] = t.contiguous()
                else:
                    out[f"{pre}mlp.experts.{e}.{pn}.weight"] = t.contiguous()
    if layout == "mixtral":
        out = {re.sub(r"\.mlp\.gate\.weight$", ".block_sparse_moe.gate.weight", k): v
               for k, v in out.items()}
    save_file(out, path, metadata={"format": "pt"})
    return saved_names


def load_f64(model_cls, path):
    kw = {"dtype": torch.float32} if V5 else {"torch_dtype": torch.float32}
    try:
        m = model_cls.from_pretrained(path, attn_implementation="eager",
                                      experts_implementation="eager", **kw)
    except (TypeError, ValueError):
        m = model_cls.from_pretrained(path, attn_implementation="eager", **kw)
    return eager(m.double().eval())


def logits_of(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long))
    return out.logits[0].double()


def reference(model, prompt):
    lp = torch.log_softmax(logits_of(model, prompt), dim=-1)
    prompt_lp = [None] + [float(lp[i - 1, prompt[i]]) for i in range(1, len(prompt))]
    ids = list(prompt)
    greedy = []
    for _ in range(GREEDY_STEPS):
        last = logits_of(model, ids)[-1]
        lps = torch.log_softmax(last, dim=-1)
        top = torch.topk(last, TOP_N)
        tid = int(top.indices[0])
        greedy.append({"id": tid, "logprob": float(lps[tid]),
                       "top": [[int(i), float(lps[int(i)])] for i in top.indices],
                       "margin": float(top.values[0] - top.values[1])})
        ids.append(tid)
    return {"ids": prompt, "prompt_logprobs": prompt_lp, "greedy": greedy}


def moe_block(layer):
    return getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe")


def router_of(mlp):
    """(weight [E, H], bias [E] or None, correction bias or None) of a MoE block."""
    for attr in ("gate", "router"):
        r = getattr(mlp, attr, None)
        if r is not None and hasattr(r, "weight") and r.weight.dim() == 2 and \
                hasattr(mlp, "experts"):
            bias = getattr(r, "bias", None)
            corr = getattr(r, "e_score_correction_bias", None)
            return r.weight.detach().double(), (bias.detach().double() if bias is not None
                                                else None), (corr.detach().double()
                                                             if corr is not None else None)
    return None


def selection(arch, cfg, logits, corr):
    """Chosen experts [T, k] and the gap between the last chosen and the best unchosen."""
    k = cfg.num_experts_per_tok
    if arch.startswith("glm4_moe"):
        s = torch.sigmoid(logits) + corr
        T, E = s.shape
        G = cfg.n_group
        gs = s.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)  # [T, G]
        gtop = gs.topk(cfg.topk_group, dim=-1)
        mask = torch.zeros_like(gs).scatter_(1, gtop.indices, 1.0)
        emask = mask.unsqueeze(-1).expand(T, G, E // G).reshape(T, E)
        masked = s.masked_fill(emask == 0, 0.0)  # as transformers masks unchosen groups
        srt = masked.sort(dim=-1, descending=True).values
        gap_e = srt[:, k - 1] - srt[:, k]
        if cfg.topk_group < G:
            gsrt = gs.sort(dim=-1, descending=True).values
            gap_g = gsrt[:, cfg.topk_group - 1] - gsrt[:, cfg.topk_group]
            gap_e = torch.minimum(gap_e, gap_g)
        return masked.topk(k, dim=-1).indices, float(gap_e.min())
    srt = logits.sort(dim=-1, descending=True).values
    return logits.topk(k, dim=-1).indices, float((srt[:, k - 1] - srt[:, k]).min())


def routing_stats(arch, model, cfg, token_lists):
    layers = model.model.layers
    captured = {}
    hooks = []
    for i, layer in enumerate(layers):
        if router_of(moe_block(layer)) is None:
            continue
        hooks.append(moe_block(layer).register_forward_hook(
            lambda mod, inp, out, i=i: captured.setdefault(i, []).append(
                inp[0].detach().double().reshape(-1, inp[0].shape[-1]))))
    for ids in token_lists:
        logits_of(model, ids)
    for h in hooks:
        h.remove()
    stats = []
    for i in sorted(captured):
        w, b, corr = router_of(moe_block(layers[i]))
        x = torch.cat(captured[i])
        logits = x @ w.T + (b if b is not None else 0)
        chosen, gap = selection(arch, cfg, logits, corr)
        counts = torch.bincount(chosen.reshape(-1), minlength=w.shape[0]).tolist()
        stats.append({"layer": i, "expert_tokens": counts,
                      "experts_used": sum(1 for c in counts if c > 0), "min_gap": gap})
    return stats


def spread_ok(stats, cfg):
    """Every MoE layer's routing used at least MIN_EXPERTS_USED of its experts."""
    return all(st["experts_used"] >= math.ceil(MIN_EXPERTS_USED * len(st["expert_tokens"]))
               for st in stats)


def write_variant(out_root, vname, name, dt, model, model_cls, cfg, kwargs, rope, layout,
                  prompts, summary):
    d = os.path.join(out_root, vname)
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16}[dt]
    copy.deepcopy(model).to(tdt).save_pretrained(d)
    summary["saved_names"][vname] = [n for n in rewrite_experts(d, layout, cfg)
                                     if ".layers.0." in n or ".layers.1." in n or
                                     "layers" not in n]
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    # The released configs keep these at the top level; transformers 5 may move them
    # into rope_parameters.
    c.setdefault("rope_theta", rope["rope_theta"])
    if "partial_rotary_factor" in kwargs:
        c.setdefault("partial_rotary_factor", kwargs["partial_rotary_factor"])
    if c.get("rope_scaling") is None:
        sc = {k: v for k, v in rope.items() if k != "rope_theta"}
        c["rope_scaling"] = None if sc["rope_type"] == "default" else sc
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    p = os.path.join(d, "generation_config.json")
    if os.path.exists(p):
        os.remove(p)
    ref_model = load_f64(model_cls, d)
    recs = [reference(ref_model, q) for q in prompts]
    full = [r["ids"] + [s["id"] for s in r["greedy"]] for r in recs]
    routing = routing_stats(name, ref_model, cfg, full)
    if not routing:
        raise RuntimeError(f"{vname}: no MoE layer was found to record routing")
    if not spread_ok(routing, cfg):
        raise RuntimeError(f"{vname}: routing uses too few experts: "
                           f"{[st['expert_tokens'] for st in routing]}")
    rot = ref_model.model.rotary_emb
    inv = getattr(rot, "inv_freq", None)
    rec = {"name": vname, "arch": name, "dtype": dt, "rope": rope,
           "rotary": {"inv_freq": [float(x) for x in inv] if inv is not None else None,
                      "attention_scaling": float(getattr(rot, "attention_scaling", 1.0))},
           "routing": routing, "prompts": recs}
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(rec, f)
    summary["variants"].append(vname)
    print("ok", vname, "min_gap", min(st["min_gap"] for st in routing),
          "experts", [st["expert_tokens"] for st in routing],
          "greedy", [st["id"] for st in recs[0]["greedy"]], flush=True)


def main():
    out_dir = os.environ.get("OUT") or sys.argv[1]
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    out_root = os.path.join(out_dir, "moe_models")
    os.makedirs(out_root, exist_ok=True)
    summary = {"transformers": transformers.__version__, "torch": torch.__version__,
               "classes": {}, "variants": [], "saved_names": {}, "errors": []}
    for n in ("Qwen3MoeForCausalLM", "MixtralForCausalLM", "GptOssForCausalLM",
              "Glm4MoeForCausalLM"):
        summary["classes"][n] = cls(n) is not None
    print(json.dumps(summary["classes"]), flush=True)
    g = torch.Generator().manual_seed(4321)
    for vi, (name, cfg_name, model_name, kwargs, rope, dtypes, layout) in enumerate(variants()):
        try:
            cfg_cls, model_cls = cls(cfg_name), cls(model_name)
            if cfg_cls is None or model_cls is None:
                raise RuntimeError(f"{model_name} is not in transformers {transformers.__version__}")
            cfg = make_config(cfg_cls, kwargs, rope)
            V = cfg.vocab_size
            prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in PROMPT_LENS]
            for attempt in range(8):
                model = eager(model_cls(cfg).float().eval())
                init_weights(model, cfg, seed=200 + 17 * vi + attempt)
                probe = routing_stats(name, eager(copy.deepcopy(model).double()), cfg, prompts)
                if min(st["min_gap"] for st in probe) > 10 * MIN_GAP and spread_ok(probe, cfg):
                    break
            for dt in dtypes:
                try:
                    write_variant(out_root, f"{name}_{dt}", name, dt, model, model_cls, cfg,
                                  kwargs, rope, layout, prompts, summary)
                except Exception:
                    traceback.print_exc()
                    summary["errors"].append({"variant": f"{name}_{dt}",
                                              "trace": traceback.format_exc()})
        except Exception:
            traceback.print_exc()
            summary["errors"].append({"variant": name, "trace": traceback.format_exc()})
    with open(os.path.join(out_root, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps({k: summary[k] for k in ("transformers", "variants", "saved_names")}))
    print("errors:", len(summary["errors"]), [e["variant"] for e in summary["errors"]])
    sys.exit(1 if summary["errors"] else 0)


if __name__ == "__main__":
    main()
