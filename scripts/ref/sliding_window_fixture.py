#!/usr/bin/env python3
"""Builds the sliding-window fixture: a tiny random Mistral with sliding_window 8 (head_dim
64, so the CUDA runner's decode and flash attention kernels run it, not only the general
one), saved in bf16, with transformers' float32 reference logprobs for prompts several
windows long. Same reference semantics as model_fixtures.py (whose helpers it uses).

Run on the GPU machine (torch + transformers; the work runs on its CPU):

    OUT=/some/dir python3 scripts/ref/sliding_window_fixture.py [--out-dir DIR]

It writes DIR/mistral_sw8_bf16/{config.json, model.safetensors, reference.json}
(DIR defaults to $OUT), ready to copy into tests/fixtures/models/.

It checks that transformers honours the window: the same weights without a window must
give different logits once a prompt is longer than the window, and the same ones while
it is not.
"""
import copy
import json
import os
import sys

import torch
from transformers import MistralConfig, MistralForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_fixtures as mf  # noqa: E402

NAME = "mistral_sw8_bf16"
WINDOW = 8
PROMPT_LENGTHS = (5, 8, 37, 70)  # shorter than, equal to and several times the window


def build(out_dir):
    torch.manual_seed(0)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    arch = dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                sliding_window=WINDOW, head_dim=64)
    rope = dict(rope_type="default", rope_theta=10000.0)
    cfg = mf.make_config(MistralConfig, arch, rope)
    try:
        cfg._attn_implementation = "eager"
    except Exception:
        pass
    model = MistralForCausalLM(cfg).float().eval()
    mf.init_weights(model, cfg, seed=901)
    g = torch.Generator().manual_seed(4321)
    prompts = [torch.randint(3, cfg.vocab_size, (n,), generator=g).tolist()
               for n in PROMPT_LENGTHS]

    d = os.path.join(out_dir, NAME)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(d)
    mf.add_legacy_rope_keys(os.path.join(d, "config.json"), rope)
    extra = os.path.join(d, "generation_config.json")
    if os.path.exists(extra):
        os.remove(extra)
    with open(os.path.join(d, "config.json")) as f:
        assert json.load(f)["sliding_window"] == WINDOW

    ref_model = mf.load_f32(MistralForCausalLM, d)
    # The window must matter past WINDOW tokens and nowhere before.
    nowin_cfg = copy.deepcopy(ref_model.config)
    nowin_cfg.sliding_window = None
    nowin = MistralForCausalLM(nowin_cfg).float().eval()
    nowin.load_state_dict(ref_model.state_dict())
    long_prompt = prompts[-1]
    a, b = mf.logits_of(ref_model, long_prompt), mf.logits_of(nowin, long_prompt)
    before = float((a[:WINDOW] - b[:WINDOW]).abs().max())
    after = float((a[WINDOW:] - b[WINDOW:]).abs().max())
    print(f"window check: max |logit diff| first {WINDOW} positions {before:.3g}, "
          f"after {after:.3g}", flush=True)
    assert before < 1e-4 and after > 1e-2, "transformers did not apply the sliding window"

    rec = {"name": NAME, "arch": "mistral", "dtype": "bf16", "rope": rope,
           "sliding_window": WINDOW, "rotary": mf.rotary_info(ref_model),
           "prompts": [mf.reference(ref_model, p) for p in prompts]}
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(rec, f)
    print("ok", NAME, "greedy", [s["id"] for s in rec["prompts"][-1]["greedy"]], flush=True)
    return d


def main():
    out_dir = os.environ.get("OUT")
    if "--out-dir" in sys.argv:
        out_dir = sys.argv[sys.argv.index("--out-dir") + 1]
    if not out_dir:
        sys.exit("usage: OUT=dir sliding_window_fixture.py [--out-dir DIR]")
    build(out_dir)


if __name__ == "__main__":
    main()
