#!/usr/bin/env python3
"""Builds tiny random Llama-family models with HF transformers and records their
float32 reference outputs, for keel's model tests (tests/model/).

Run on a machine with torch + transformers (the GPU machine; the work runs on its CPU
so that no TF32 or reduced-precision GPU path touches the reference):

    OUT=/some/dir python3 scripts/ref/model_fixtures.py

It writes $OUT/models.tar.gz holding, for every variant, <name>/ (config.json +
model.safetensors as save_pretrained wrote them) and reference.json. Unpack it into
tests/fixtures/models/.

Reference semantics (what the C++ tests compare against):
  * the saved model is re-loaded from disk in float32 (so bf16/f16 variants are the
    rounded weights computed in float32) with eager attention, on the CPU;
  * prompt_logprobs[i] = log_softmax(logits at position i-1)[ids[i]] (null for i = 0);
  * greedy: n steps of argmax over the last position's logits of a full recompute;
    each step records the chosen id, its logprob, the top-5 [[id, logprob]], and the
    margin between the top two logits.
"""
import copy
import json
import math
import os
import sys
import tarfile
import tempfile
import traceback

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

V5 = int(transformers.__version__.split(".")[0]) >= 5
GREEDY_STEPS = 12
TOP_N = 5

# name: (config class, model class, arch kwargs, rope dict, dtypes, prompt lengths)
COMMON = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1,
              eos_token_id=2, pad_token_id=0)


def variants():
    out = []
    # Llama 2 style: GQA (4 q heads, 2 kv heads), untied, default rope.
    out.append(("llama_gqa", LlamaConfig, LlamaForCausalLM,
                dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
                dict(rope_type="default", rope_theta=10000.0), ["f32", "bf16", "f16"]))
    # Llama 3 style: llama3 rope scaling, MQA, head_dim != hidden / heads, tied embeddings.
    out.append(("llama3_mqa", LlamaConfig, LlamaForCausalLM,
                dict(num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                     tie_word_embeddings=True),
                dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                     high_freq_factor=4.0, original_max_position_embeddings=64),
                ["f32", "bf16"]))
    # MHA with linear rope scaling.
    out.append(("llama_linear_mha", LlamaConfig, LlamaForCausalLM,
                dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False),
                dict(rope_type="linear", rope_theta=10000.0, factor=2.0), ["f32"]))
    # YaRN: max_position_embeddings == factor * original so that every transformers
    # version derives the same attention factor.
    out.append(("llama_yarn", LlamaConfig, LlamaForCausalLM,
                dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                     max_position_embeddings=256),
                dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                     original_max_position_embeddings=64, beta_fast=32.0, beta_slow=1.0),
                ["f32"]))
    out.append(("mistral", MistralConfig, MistralForCausalLM,
                dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                     sliding_window=None, head_dim=16),
                dict(rope_type="default", rope_theta=10000.0), ["f32", "f16"]))
    # Qwen2: q/k/v biases, tied embeddings.
    out.append(("qwen2", Qwen2Config, Qwen2ForCausalLM,
                dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                     use_sliding_window=False),
                dict(rope_type="default", rope_theta=1000000.0), ["f32", "bf16", "f16"]))
    # Qwen3: per-head q/k RMSNorm, explicit head_dim (32, while hidden / heads = 16).
    out.append(("qwen3", Qwen3Config, Qwen3ForCausalLM,
                dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                     tie_word_embeddings=False, attention_bias=False, use_sliding_window=False),
                dict(rope_type="default", rope_theta=1000000.0), ["f32", "bf16", "f16"]))
    return out


def make_config(cfg_cls, arch_kwargs, rope):
    kw = dict(COMMON)
    kw.update(arch_kwargs)
    if V5:
        kw["rope_parameters"] = dict(rope)
    else:
        kw["rope_theta"] = rope["rope_theta"]
        scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
        kw["rope_scaling"] = None if scaling["rope_type"] == "default" else scaling
    return cfg_cls(**kw)


def init_weights(model, cfg, seed):
    """Weights with O(1) activations and peaked logits (HF's 0.02 init gives nearly
    uniform outputs, which would make greedy comparisons meaningless)."""
    g = torch.Generator().manual_seed(seed)
    hidden = cfg.hidden_size
    tied = cfg.tie_word_embeddings
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                std = 3.0 / math.sqrt(hidden) if tied else 1.0
                p.copy_(std * torch.randn(p.shape, generator=g))
            elif "lm_head" in name:
                p.copy_(3.0 / math.sqrt(hidden) * torch.randn(p.shape, generator=g))
            else:  # linear [out, in]
                p.copy_(1.0 / math.sqrt(p.shape[-1]) * torch.randn(p.shape, generator=g))


def load_f32(model_cls, path):
    kw = {"dtype": torch.float32} if V5 else {"torch_dtype": torch.float32}
    try:
        m = model_cls.from_pretrained(path, attn_implementation="eager", **kw)
    except TypeError:
        m = model_cls.from_pretrained(path, **kw)
    return m.float().eval()


def logits_of(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long))
    return out.logits[0].double()  # [len, vocab]; float32 values, widened for log_softmax


def reference(model, prompt):
    lg = logits_of(model, prompt)
    lp = torch.log_softmax(lg, dim=-1)
    prompt_lp = [None] + [float(lp[i - 1, prompt[i]]) for i in range(1, len(prompt))]
    ids = list(prompt)
    greedy = []
    for _ in range(GREEDY_STEPS):
        last = logits_of(model, ids)[-1]
        lps = torch.log_softmax(last, dim=-1)
        top = torch.topk(last, TOP_N)
        tid = int(top.indices[0])
        greedy.append({
            "id": tid,
            "logprob": float(lps[tid]),
            "top": [[int(i), float(lps[int(i)])] for i in top.indices],
            "margin": float(top.values[0] - top.values[1]),
        })
        ids.append(tid)
    return {"ids": prompt, "prompt_logprobs": prompt_lp, "greedy": greedy}


def rotary_info(model):
    rot = model.model.rotary_emb
    inv = getattr(rot, "inv_freq", None)
    return {
        "inv_freq": [float(x) for x in inv] if inv is not None else None,
        "attention_scaling": float(getattr(rot, "attention_scaling", 1.0)),
    }


def add_legacy_rope_keys(cfg_path, rope):
    """transformers 5 writes rope_parameters; most published checkpoints carry the
    older rope_theta / rope_scaling keys. Write both so either reader finds them."""
    with open(cfg_path) as f:
        c = json.load(f)
    c.setdefault("rope_theta", rope["rope_theta"])
    if "rope_scaling" not in c or c["rope_scaling"] is None:
        scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
        c["rope_scaling"] = None if scaling["rope_type"] == "default" else scaling
    with open(cfg_path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def main():
    out_dir = os.environ.get("OUT") or sys.argv[1]
    torch.manual_seed(0)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    work = tempfile.mkdtemp(prefix="keel_fixtures_")
    summary = {"transformers": transformers.__version__, "torch": torch.__version__,
               "variants": [], "errors": []}
    g = torch.Generator().manual_seed(1234)
    for vi, (name, cfg_cls, model_cls, arch_kwargs, rope, dtypes) in enumerate(variants()):
        try:
            cfg = make_config(cfg_cls, arch_kwargs, rope)
            try:
                cfg._attn_implementation = "eager"
            except Exception:
                pass
            model = model_cls(cfg).float().eval()
            init_weights(model, cfg, seed=100 + vi)
            V = cfg.vocab_size
            # Prompt lengths cover one block (16), several blocks, and block edges.
            prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (5, 16, 37)]
            for dt in dtypes:
                vname = f"{name}_{dt}"
                d = os.path.join(work, vname)
                tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dt]
                # A copy, so that the f32 master weights are never rounded.
                copy.deepcopy(model).to(tdt).save_pretrained(d)
                add_legacy_rope_keys(os.path.join(d, "config.json"), rope)
                for extra in ("generation_config.json",):
                    p = os.path.join(d, extra)
                    if os.path.exists(p):
                        os.remove(p)
                ref_model = load_f32(model_cls, d)
                rec = {"name": vname, "arch": name, "dtype": dt, "rope": rope,
                       "rotary": rotary_info(ref_model),
                       "prompts": [reference(ref_model, p) for p in prompts]}
                with open(os.path.join(d, "reference.json"), "w") as f:
                    json.dump(rec, f)
                summary["variants"].append(vname)
                print("ok", vname, "greedy", [s["id"] for s in rec["prompts"][0]["greedy"]],
                      flush=True)
        except Exception:
            traceback.print_exc()
            summary["errors"].append({"variant": name, "trace": traceback.format_exc()})
    with open(os.path.join(work, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    os.makedirs(out_dir, exist_ok=True)
    with tarfile.open(os.path.join(out_dir, "models.tar.gz"), "w:gz") as tar:
        for entry in sorted(os.listdir(work)):
            tar.add(os.path.join(work, entry), arcname=entry)
    print(json.dumps({k: summary[k] for k in ("transformers", "torch", "variants")}))
    print("errors:", len(summary["errors"]))


if __name__ == "__main__":
    main()
