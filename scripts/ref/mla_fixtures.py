#!/usr/bin/env python3
"""Builds tiny random multi-head latent attention models (deepseek_v3, glm_moe_dsa) with
HF transformers and records their float64 reference outputs, for keel's model tests
(tests/model/test_cpu_mla_fixtures.cpp). Run on the GPU machine (torch + transformers),
on its CPU in float64:

    OUT=/some/dir python3 scripts/ref/mla_fixtures.py

Writes $OUT/mla_models/<name>/ (config.json, model.safetensors with per-expert tensors as
the releases name them, reference.json) and $OUT/mla_models/summary.json. The reference is
taken from the saved files re-loaded (moe_fixtures.py's helpers: rewrite_experts,
load_f64, reference). Prompts run past index_topk so that the DSA selection matters;
reference.json["indexer"] records, per indexer layer, the smallest gap between the last
selected and the first unselected index score over all queries that had to choose (a
seed whose gap is below MIN_GAP is replaced by the next).
"""
import copy
import json
import os
import sys
import traceback

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_fixtures as mf  # noqa: E402

PROMPTS = (5, 21, 40)
MIN_GAP = 1e-4

COMMON = dict(vocab_size=320, hidden_size=64, max_position_embeddings=256, rms_norm_eps=1e-5,
              bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
              intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=48,
              qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=24, n_routed_experts=8,
              n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
              first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.5,
              attention_bias=False, num_nextn_predict_layers=0)


def variants():
    """(name, config class, model class, kwargs, rope, dtypes)."""
    out = []
    out.append(("deepseek_v3", "DeepseekV3Config", "DeepseekV3ForCausalLM",
                dict(rope_interleave=True),
                dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                     original_max_position_embeddings=64, beta_fast=32.0, beta_slow=1.0,
                     mscale=1.0, mscale_all_dim=1.0),
                ["f32", "bf16"]))
    out.append(("deepseek_v3_noqlora", "DeepseekV3Config", "DeepseekV3ForCausalLM",
                dict(rope_interleave=False, q_lora_rank=None, first_k_dense_replace=0,
                     num_hidden_layers=2, norm_topk_prob=False, n_group=1, topk_group=1),
                dict(rope_type="default", rope_theta=10000.0), ["f32"]))
    dsa = dict(index_topk=8, index_n_heads=8, index_head_dim=16,
               indexer_types=["full", "shared", "full"], mlp_layer_types=None)
    out.append(("glm_moe_dsa", "GlmMoeDsaConfig", "GlmMoeDsaForCausalLM", dsa,
                dict(rope_type="default", rope_theta=10000.0), ["f32", "bf16"]))
    return out


def make_config(cfg_cls, kwargs, rope):
    kw = dict(COMMON)
    kw.update({k: v for k, v in kwargs.items() if v is not None or k == "q_lora_rank"})
    kw["rope_parameters"] = dict(rope)
    try:
        cfg = cfg_cls(**kw)
    except Exception as e:  # an older GlmMoeDsaConfig without indexer_types
        print("config retry without indexer_types:", e, flush=True)
        kw.pop("indexer_types", None)
        cfg = cfg_cls(**kw)
    for attr in ("_attn_implementation", "_experts_implementation"):
        try:
            setattr(cfg, attr, "eager")
        except Exception:
            pass
    return cfg


def indexer_gaps(model, cfg, token_lists):
    """Per full indexer layer: the smallest gap at the top-k boundary over queries with
    more than index_topk earlier tokens (the selection is recomputed from hooks)."""
    topk = getattr(cfg, "index_topk", 0)
    if not topk:
        return []
    gaps = {}
    hooks = []
    for i, layer in enumerate(model.model.layers):
        idx = getattr(layer.self_attn, "indexer", None)
        if idx is None or getattr(layer.self_attn, "skip_topk", False):
            continue

        def hook(mod, args, kwargs, out, i=i):
            h = kwargs.get("hidden_states", args[0] if args else None)
            q_resid = kwargs.get("q_resid", args[1] if len(args) > 1 else None)
            pos = kwargs.get("position_embeddings", args[2] if len(args) > 2 else None)
            cos, sin = pos
            B, S, _ = h.shape
            q = mod.wq_b(q_resid).view(B, S, mod.n_heads, mod.head_dim)
            r = mod.qk_rope_head_dim
            from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as mm
            k = mod.k_norm(mod.wk(h)).unsqueeze(2)
            q_rot, k_rot = mm.apply_rotary_pos_emb_interleave(q[..., :r], k[..., :r], cos, sin,
                                                              unsqueeze_dim=2)
            q = torch.cat([q_rot, q[..., r:]], -1)
            k = torch.cat([k_rot, k[..., r:]], -1).squeeze(2)
            w = mod.weights_proj(h).double() * mod.n_heads ** -0.5
            sc = torch.relu(torch.einsum("bshd,btd->bsht", q.double(), k.double()) *
                            mod.softmax_scale)
            s = torch.einsum("bsht,bsh->bst", sc, w)[0]
            for qi in range(topk, S):
                row = s[qi, :qi + 1].sort(descending=True).values
                g = float(row[topk - 1] - row[topk])
                gaps[i] = min(gaps.get(i, 1e9), g)
        hooks.append(idx.register_forward_hook(hook, with_kwargs=True))
    for ids in token_lists:
        mf.logits_of(model, ids)
    for h in hooks:
        h.remove()
    return [{"layer": i, "min_gap": g} for i, g in sorted(gaps.items())]


def write_variant(out_root, vname, name, dt, model, model_cls, cfg, rope, prompts, summary):
    d = os.path.join(out_root, vname)
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16}[dt]
    copy.deepcopy(model).to(tdt).save_pretrained(d)
    summary["saved_names"][vname] = [n for n in mf.rewrite_experts(d, "per_expert", cfg)
                                     if ".layers.0." in n or ".layers.1." in n or
                                     "layers" not in n]
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    c.setdefault("rope_theta", rope["rope_theta"])
    if c.get("rope_scaling") is None:
        sc = {k: v for k, v in rope.items() if k != "rope_theta"}
        c["rope_scaling"] = None if sc["rope_type"] == "default" else sc
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    p = os.path.join(d, "generation_config.json")
    if os.path.exists(p):
        os.remove(p)
    ref_model = mf.load_f64(model_cls, d)
    recs = [mf.reference(ref_model, q) for q in prompts]
    full = [r["ids"] + [s["id"] for s in r["greedy"]] for r in recs]
    routing = mf.routing_stats("glm4_moe", ref_model, cfg, full)
    idx = indexer_gaps(ref_model, cfg, full)
    rot = ref_model.model.rotary_emb
    inv = getattr(rot, "inv_freq", None)
    shared = [bool(getattr(l.self_attn, "skip_topk", False)) for l in ref_model.model.layers]
    rec = {"name": vname, "arch": name, "dtype": dt, "rope": rope,
           "rotary": {"inv_freq": [float(x) for x in inv] if inv is not None else None,
                      "attention_scaling": float(getattr(rot, "attention_scaling", 1.0))},
           "scaling": float(getattr(ref_model.model.layers[0].self_attn, "scaling", 0.0)),
           "modules": {n: type(m).__name__ for n, m in
                       ref_model.model.layers[0].self_attn.named_modules() if n},
           "index_shared": shared, "routing": routing, "indexer": idx, "prompts": recs}
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(rec, f)
    summary["variants"].append(vname)
    print("ok", vname, "route_gap", min(st["min_gap"] for st in routing),
          "index_gaps", [st["min_gap"] for st in idx], "shared", shared,
          "greedy", [st["id"] for st in recs[0]["greedy"]], flush=True)


def main():
    out_dir = os.environ.get("OUT") or sys.argv[1]
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    out_root = os.path.join(out_dir, "mla_models")
    os.makedirs(out_root, exist_ok=True)
    summary = {"transformers": transformers.__version__, "torch": torch.__version__,
               "variants": [], "saved_names": {}, "errors": []}
    import shutil
    for mod in ("deepseek_v3", "glm_moe_dsa"):  # the exact code the references ran
        try:
            src = os.path.join(os.path.dirname(transformers.__file__), "models", mod,
                               f"modeling_{mod}.py")
            shutil.copy(src, os.path.join(out_root, f"modeling_{mod}.py.txt"))
        except Exception as e:
            print("copy", mod, e, flush=True)
    g = torch.Generator().manual_seed(9876)
    only = os.environ.get("MLA_ONLY")  # a name prefix: make only those variants
    for vi, (name, cfg_name, model_name, kwargs, rope, dtypes) in enumerate(variants()):
        if only and not name.startswith(only):
            continue
        try:
            cfg_cls, model_cls = mf.cls(cfg_name), mf.cls(model_name)
            if cfg_cls is None or model_cls is None:
                raise RuntimeError(f"{model_name} is not in transformers {transformers.__version__}")
            cfg = make_config(cfg_cls, kwargs, rope)
            prompts = [torch.randint(3, cfg.vocab_size, (n,), generator=g).tolist()
                       for n in PROMPTS]
            for attempt in range(10):
                model = mf.eager(model_cls(cfg).float().eval())
                mf.init_weights(model, cfg, seed=500 + 31 * vi + attempt)
                probe = mf.eager(copy.deepcopy(model).double())
                rstats = mf.routing_stats("glm4_moe", probe, cfg, prompts)
                istats = indexer_gaps(probe, cfg, prompts)
                ok = min(st["min_gap"] for st in rstats) > 10 * mf.MIN_GAP and \
                    mf.spread_ok(rstats, cfg) and all(st["min_gap"] > MIN_GAP for st in istats)
                print(name, "attempt", attempt, "ok" if ok else "retry", flush=True)
                if ok:
                    break
            for dt in dtypes:
                try:
                    write_variant(out_root, f"{name}_{dt}", name, dt, model, model_cls, cfg, rope,
                                  prompts, summary)
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
