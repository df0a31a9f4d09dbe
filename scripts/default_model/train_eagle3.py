#!/usr/bin/env python3
"""Train an EAGLE-3 draft head for keel's default model (speculative decoding:
`keel run|serve --speculative eagle3:PATH`).

Runs on the GPU machine (Python 3.12, torch 2.11, tokenizers 0.23; no network) in one call,
stopping by wall clock. Reuses train.py's model pieces, data loading, optimizer, schedule and
safetensors writer and train_draft.py's teacher loading, greedy continuations and acceptance
simulation:

  1. loads the default model (the target, models/default) frozen, and its tokenizer; counts
     the training stream's tokens and keeps the --draft-vocab most frequent as the head's
     output vocabulary (d2t: target id of draft id d = d + d2t[d]; t2d: the target ids kept);
  2. trains a head in the layout keel's loader reads (src/exec/arch/eagle3_head.h, the
     layout of the public EAGLE-3 checkpoints): fc over the concatenation of the target's
     layer outputs --aux-layers (eagle_config.eagle_aux_hidden_state_layer_ids), one Llama
     decoder layer `midlayer` whose attention reads [input_layernorm(embed(x_{t+1})) ;
     hidden_norm(g)] (2 x hidden wide) with g = fc(aux) as its residual, `norm`, and
     `lm_head` over the draft vocabulary; the target's embedding (the head stores none).
     Training is EAGLE-3's training-time test: the head is unrolled --ttt-steps times on its
     own outputs (step j at index t is fed step j-1's h' and the true token x_{t+j+1}, sits
     at position t + j and attends to step 0's keys at indices <= t and to steps 1..j's keys
     at index t: what keel's cache holds when a chain started at t reaches step j), each
     step's loss the cross-entropy against the target's next-token distribution restricted
     to the draft vocabulary (positions whose target argmax lies outside it left out),
     weighted 0.8^j; bf16 autocast, AdamW, warm-up + cosine decay over the wall-clock budget
     (train.py's);
  3. writes the head directory: model.safetensors (bf16 weights, I64 d2t, BOOL t2d),
     config.json (LlamaForCausalLMEagle3), README.md, train_eagle3.json;
  4. measures greedy acceptance on held-out text as train_draft.py does: N windows of 64
     held-out tokens after <|bos|>, the target continues greedily for 128 tokens, and greedy
     speculative decoding with k drafts (k = 1..6) is simulated against them: the head
     proposes k tokens chained on its own hidden states, accepted = the longest prefix equal
     to the target's tokens, then the target's token is appended. Accepted tokens are the
     target's own, so the a-th draft from a state is the training-time-test step a at that
     state's index over the teacher-forced sequence (one unrolled pass gives every step; a
     step-by-step simulation with a key/value cache, as keel drafts, checks this on a few
     prompts). Written to acceptance.json.

Usage (GPU machine):
  python3 scripts/default_model/train_eagle3.py --train .devcarry-data/default_model/train.txt.xz \\
      --teacher models/default --out $OUT/eagle3 --train-seconds 150 --deadline-seconds 270
Smoke test on a CPU (a few steps of the full-size head, held-out text as training text unless
--train is given; explicit options override the smoke sizes):
  python3 scripts/default_model/train_eagle3.py --smoke --out /tmp/eagle3-smoke
"""

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train as T  # noqa: E402 - train.py beside this file
import train_draft as D  # noqa: E402
from train import BOS_ID, EOS_ID, log  # noqa: E402

HERE, ROOT = T.HERE, D.ROOT


# ---------------------------------------------------------------- the head


def draft_vocabulary(stream, vocab, size):
    """The `size` most frequent ids of the stream (ties: lower id first), in id order, and the
    stream's counts."""
    counts = torch.bincount(stream.cpu(), minlength=vocab).tolist()
    order = sorted(range(vocab), key=lambda i: (-counts[i], i))
    return sorted(order[:size]), counts


def attend(q, k, v, mask):
    """Attention of q [B, nh, n, hd] over k, v [B, nkv, m, hd]; mask [n, m] (True: attend) or None."""
    rep = q.shape[1] // k.shape[1]  # query head h reads kv head h // rep
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # old torch (the CPU smoke test)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1) @ v


class HeadAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        d = c["hidden_size"]
        self.q_proj = nn.Linear(2 * d, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(2 * d, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(2 * d, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, d, bias=False)


class Midlayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, eps = c["hidden_size"], c["rms_norm_eps"]
        self.input_layernorm = T.RMSNorm(d, eps)
        self.hidden_norm = T.RMSNorm(d, eps)
        self.self_attn = HeadAttention(c)
        self.post_attention_layernorm = T.RMSNorm(d, eps)
        self.mlp = T.MLP(c)


class Eagle3Head(nn.Module):
    """Parameter names are keel's (and the EAGLE-3 checkpoints'): fc, midlayer.*, norm, lm_head,
    d2t, t2d. `embed` (the target's embed_tokens) is passed in, not owned."""

    def __init__(self, c, aux_width, vocab_ids, vocab, max_pos):
        super().__init__()
        self.c = c
        d = c["hidden_size"]
        self.fc = nn.Linear(aux_width, d, bias=False)
        self.midlayer = Midlayer(c)
        self.norm = T.RMSNorm(d, c["rms_norm_eps"])
        self.lm_head = nn.Linear(d, len(vocab_ids), bias=False)
        ids = torch.tensor(vocab_ids, dtype=torch.long)
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[ids] = True
        self.register_buffer("d2t", ids - torch.arange(len(ids)))
        self.register_buffer("t2d", t2d)
        self.register_buffer("vocab_ids", ids, persistent=False)
        hd = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        std = c["initializer_range"]
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, std / math.sqrt(2) if name.endswith(("o_proj.weight", "down_proj.weight"))
                                else std)

    def qkv(self, g, e, pos):
        """The layer's q [B, nh, n, hd], k, v [B, nkv, n, hd] (roped at positions pos [n]) from
        g [B, n, D] (fc's output or a chained h') and the token embeddings e [B, n, D]."""
        ml, a = self.midlayer, self.midlayer.self_attn
        cat = torch.cat([ml.input_layernorm(e), ml.hidden_norm(g)], -1)
        B, n, _ = cat.shape
        q = a.q_proj(cat).view(B, n, a.nh, a.hd).transpose(1, 2)
        k = a.k_proj(cat).view(B, n, a.nkv, a.hd).transpose(1, 2)
        v = a.v_proj(cat).view(B, n, a.nkv, a.hd).transpose(1, 2)
        cos, sin = self.cos[pos].to(q.dtype), self.sin[pos].to(q.dtype)
        return q * cos + T.rotate_half(q) * sin, k * cos + T.rotate_half(k) * sin, v

    def finish(self, g, att):
        """h' (before `norm`) from the residual g and the attention output att [B, nh, n, hd]."""
        ml = self.midlayer
        B, _, n, _ = att.shape
        x = g + ml.self_attn.o_proj(att.transpose(1, 2).reshape(B, n, -1))
        return x + ml.mlp(ml.post_attention_layernorm(x))

    def logits(self, h):  # over the draft vocabulary
        return self.lm_head(self.norm(h))

    def guess(self, h):  # target ids of the argmax
        return self.vocab_ids[self.logits(h).float().argmax(-1)]

    def ttt(self, aux, ids, embed, steps):
        """The training-time test over windows ids [B, W] with the target's aux rows [B, W, A]:
        h' of each step j < steps, [B, W, D]. Step j at index t is fed g (fc(aux_t) at step 0,
        else step j-1's h' at t) and the token ids[t + j + 1] (EOS past the window), sits at
        position t + j, attends to step 0's keys at indices <= t and to steps 1..j's keys at
        index t, and guesses ids[t + j + 2]."""
        B, W = ids.shape
        tri = torch.ones(W, W, dtype=torch.bool, device=ids.device).tril()
        eye = torch.eye(W, dtype=torch.bool, device=ids.device)
        pos = torch.arange(W, device=ids.device)
        g = self.fc(aux)
        ks, vs, hs = [], [], []
        for j in range(steps):
            tok = F.pad(ids[:, j + 1:], (0, j + 1), value=EOS_ID)
            q, k, v = self.qkv(g, embed(tok), pos + j)
            ks.append(k)
            vs.append(v)
            mask = torch.cat([tri] + [eye] * j, 1)
            g = self.finish(g, attend(q, torch.cat(ks, 2), torch.cat(vs, 2), mask))
            hs.append(g)
        return hs

    def propose(self, aux, ids, embed, k):
        """keel's drafting, step by step (engine/hidden_state_drafter.cpp): ids [n] known tokens,
        aux [n - 1, A] the target's rows of positions 0..n-2. The layer runs over positions
        0..n-2 (g = fc(aux_t), token ids[t + 1]), keeping keys and values; the last one's h'
        guesses ids[n]; each further draft is one position more, fed the previous h' and guess,
        attending over everything kept. Returns k target ids."""
        n = len(ids)
        g = self.fc(aux[None, :n - 1])
        pos = torch.arange(n - 1, device=ids.device)
        q, kk, vv = self.qkv(g, embed(ids[None, 1:]), pos)
        causal = torch.ones(n - 1, n - 1, dtype=torch.bool, device=ids.device).tril()
        h = self.finish(g, attend(q, kk, vv, causal))[:, -1:]
        out = [self.guess(h)]
        for i in range(1, k):
            q, k1, v1 = self.qkv(h, embed(out[-1]), pos[-1:] + i)
            kk, vv = torch.cat([kk, k1], 2), torch.cat([vv, v1], 2)
            h = self.finish(h, attend(q, kk, vv, None))
            out.append(self.guess(h))
        return [int(t) for t in out]


def head_config(tc, args):
    """The head's layer (its own intermediate size; hidden size, heads and rope the target's)."""
    return {"hidden_size": tc["hidden_size"], "intermediate_size": args.ffn,
            "num_attention_heads": tc["num_attention_heads"], "num_key_value_heads": tc["num_key_value_heads"],
            "head_dim": tc["head_dim"], "rms_norm_eps": tc["rms_norm_eps"], "rope_theta": tc["rope_theta"],
            "initializer_range": 0.02}


def hf_config(c, tc, draft_vocab, aux_layers):
    """config.json as the EAGLE-3 checkpoints ship it (formats/eagle3_config.h reads it)."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": c["hidden_size"], "intermediate_size": c["intermediate_size"],
        "num_attention_heads": c["num_attention_heads"], "num_key_value_heads": c["num_key_value_heads"],
        "head_dim": c["head_dim"], "num_hidden_layers": 1, "hidden_act": "silu",
        "rms_norm_eps": c["rms_norm_eps"], "rope_theta": c["rope_theta"],
        "max_position_embeddings": tc["max_position_embeddings"], "vocab_size": tc["vocab_size"],
        "draft_vocab_size": draft_vocab, "target_hidden_size": tc["hidden_size"],
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_layers)},
    }


def macs_per_token(tc, c, aux_width, draft_vocab):
    """Weight multiply-adds per token: the target's decode, and the head's three kinds of row
    (a first draft: fc, layer and lm_head; a chained draft: layer and lm_head; a catch-up row
    over accepted tokens: fc and layer)."""
    d, f = tc["hidden_size"], tc["intermediate_size"]
    q, kv = tc["num_attention_heads"] * tc["head_dim"], tc["num_key_value_heads"] * tc["head_dim"]
    target = tc["num_hidden_layers"] * (d * (q + 2 * kv) + q * d + 3 * d * f) + tc["vocab_size"] * d
    hq, hkv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    layer = 2 * d * (hq + 2 * hkv) + hq * d + 3 * d * c["intermediate_size"]
    fc, lm = aux_width * d, draft_vocab * d
    return {"target": target, "head_first_draft": fc + layer + lm, "head_chained_draft": layer + lm,
            "head_catch_up_row": fc + layer}


# ---------------------------------------------------------------- acceptance


def literal_steps(head, embed, aux, prompt_len, full, k):
    """Step-by-step greedy speculative decoding of one prompt with head.propose (the target's
    rows over the accepted tokens are its teacher-forced rows, aux [W, A])."""
    n_new, p, steps = len(full) - prompt_len, 0, 0
    cont = full[prompt_len:].tolist()
    while p < n_new:
        n = prompt_len + p
        proposal = head.propose(aux[:n - 1], full[:n], embed, min(k, n_new - p))
        a = 0
        while a < len(proposal) and proposal[a] == cont[p + a]:
            a += 1
        p += min(a + 1, n_new - p)
        steps += 1
    return steps


@torch.no_grad()
def measure_acceptance(teacher, head, aux_layers, held_ids, n_prompts, prompt_len, n_new, max_k, device, n_literal):
    t0 = time.time()
    span = len(held_ids) - prompt_len
    starts = sorted(set(int(i * span / n_prompts) for i in range(n_prompts)))
    prompts = [[BOS_ID] + held_ids[s:s + prompt_len] for s in starts]
    cont = D.teacher_greedy(teacher, prompts, n_new, device)  # [N, n_new]
    full = torch.cat([torch.tensor(prompts), cont], dim=1).to(device)
    L = len(prompts[0])
    embed = teacher.model.embed_tokens
    pred, auxes = [], []
    for i in range(0, len(full), 64):
        _, aux = teacher.forward_layers(full[i:i + 64], aux_layers)
        aux = torch.cat(aux, -1)
        hs = head.ttt(aux, full[i:i + 64], embed, max_k)
        pred.append(torch.stack([head.guess(h) for h in hs], 1).cpu())  # [b, max_k, W]
        if i == 0:
            auxes = aux[:n_literal]
    pred = torch.cat(pred)
    # The a-th draft at state p (p continuation tokens known, so the last known one at index
    # L + p - 1) comes from index L + p - 2 and guesses cont[p + a].
    chains = []
    for i in range(len(prompts)):
        c = cont[i].tolist()
        chains.append([[p + a < n_new and int(pred[i, a, L + p - 2]) == c[p + a] for p in range(n_new)]
                       for a in range(max_k)])
    n_pairs = [sum(1 for p in range(n_new) if p + a < n_new) * len(chains) for a in range(max_k)]
    agreement = [round(sum(sum(ch[a]) for ch in chains) / n_pairs[a], 4) for a in range(max_k)]
    result = {
        "definition": "greedy speculative decoding with the EAGLE-3 head simulated against the target's greedy "
                      "continuation: each step the head proposes k tokens, chained on its own hidden states as "
                      "keel drafts, accepted = longest prefix equal to the target's tokens, then the target's "
                      "next token is appended (a step emits accepted+1 tokens, capped at the tokens left; no "
                      "drafting past the last one). tokens_per_step = all emitted tokens / all steps. "
                      "position_acceptance[i] = P(draft token i accepted | tokens < i accepted). EOS does not "
                      "stop generation.",
        "prompts": len(prompts), "prompt_tokens": prompt_len, "new_tokens": n_new,
        "prompt_source": "held-out text, evenly spaced windows, each after <|bos|>",
        "top1_agreement": agreement[0],
        "chain_agreement": agreement,
        "chain_agreement_definition": "chain_agreement[a]: P(the a-th chained draft equals the target's token), "
                                      "earlier drafts fed the target's tokens (teacher-forced), over all states",
        "draft_vocab_coverage": round(float(head.t2d[cont.to(device)].float().mean()), 4),
        "k": D.tabulate(chains, max_k, by_state=True),
    }
    agree, n_lit = 0, min(n_literal, len(prompts))
    for j in range(n_lit):
        agree += literal_steps(head, embed, auxes[j], L, full[j], max_k) == \
            D.simulate(chains[j], max_k, by_state=True)[0]
    result["literal_check"] = (f"{agree}/{n_lit} prompts: step-by-step k={max_k} drafting with a key/value cache "
                               "gives the same step count")
    result["seconds"] = round(time.time() - t0, 1)
    return result


# ---------------------------------------------------------------- README


def write_readme(out, c, tc, n_params, info, acc, macs, teacher_dir):
    rows = "\n".join(f"| {kk} | {v['tokens_per_step']:.3f} | " + ", ".join(f"{x:.3f}" for x in v["position_acceptance"]
                                                                       if x is not None) + " |"
                     for kk, v in acc["k"].items())
    r = {k: v / macs["target"] for k, v in macs.items()}
    text = f"""# EAGLE-3 head for keel's default model

An EAGLE-3 draft head ({n_params / 1e6:.2f}M parameters) for keel's built-in default model
(`{teacher_dir}`), for speculative decoding: `keel run|serve --speculative eagle3:PATH`
(the CPU runner). The layout of the public EAGLE-3 checkpoints, as keel reads it
(`src/exec/arch/eagle3_head.h`): `fc` over the concatenation of the target's layer outputs
{info['aux_layers']} (`eagle_config.eagle_aux_hidden_state_layer_ids`), one Llama decoder layer
`midlayer` whose attention reads [input_layernorm(embed(next token)) ; hidden_norm(fc(...))],
`norm`, and `lm_head` over a draft vocabulary of the {info['draft_vocab']} most frequent tokens of the
training text (`d2t`, `t2d`); the token embedding is the target's (the head stores none).

| | |
| --- | --- |
| layer | hidden {c['hidden_size']} (the target's), {c['num_attention_heads']} query heads / {c['num_key_value_heads']} KV heads, head dim {c['head_dim']}, attention input {2 * c['hidden_size']}, SwiGLU {c['intermediate_size']}, RMSNorm eps {c['rms_norm_eps']}, RoPE theta {c['rope_theta']:g} |
| fc | {info['aux_width']} -> {c['hidden_size']} (target layers {info['aux_layers']}, outputs: the residual stream after each) |
| draft vocabulary | {info['draft_vocab']} of {tc['vocab_size']} ids: {100 * info['stream_coverage']:.1f}% of the training stream's tokens, {100 * acc['draft_vocab_coverage']:.1f}% of the target's greedy tokens below |
| weights | `model.safetensors`: bf16, {n_params:,} parameters; `d2t` I64, `t2d` BOOL |
| cost, weight multiply-adds per token | target {macs['target'] / 1e6:.2f}M; head: first draft {macs['head_first_draft'] / 1e6:.2f}M ({r['head_first_draft']:.2f}x), chained draft {macs['head_chained_draft'] / 1e6:.2f}M ({r['head_chained_draft']:.2f}x), catch-up row (accepted token, no lm_head) {macs['head_catch_up_row'] / 1e6:.2f}M ({r['head_catch_up_row']:.2f}x) |

## Training

`scripts/default_model/train_eagle3.py` on {info['device_name']} (torch {info['torch']}), {info['date']}:
{info['steps']} steps of {info['batch']} x {info['seq']} tokens ({info['tokens'] / 1e6:.0f}M tokens) in {info['seconds']:.0f} s,
on the default model's training text (`scripts/default_model/prepare_data.py`; stream of
{info['stream_tokens'] / 1e6:.2f}M tokens), the target frozen. EAGLE-3's training-time test: the head
unrolled {info['ttt_steps']} steps on its own outputs (step j fed step j-1's h' and the true next token,
at position t + j, attending to step 0's keys up to t and to its own chain's), loss per step the
cross-entropy against the target's next-token distribution over the draft vocabulary (positions
whose target argmax is outside it left out), weighted 0.8^j; bf16 autocast, AdamW (lr {info['lr']:g},
betas 0.9/0.95, weight decay 0.1), 150 warm-up steps and a cosine decay to 10% over the
wall-clock budget. Held-out teacher-forced agreement with the target's argmax per step at the end:
{', '.join(f'{x:.3f}' for x in info['held_agreement'])}.

## Acceptance (greedy)

`acceptance.json`: {acc['prompts']} windows of {acc['prompt_tokens']} held-out tokens after `<|bos|>`; the target
continues greedily for {acc['new_tokens']} tokens; greedy speculative decoding with k drafted tokens
(chained on the head's own hidden states, as keel drafts) is simulated against those tokens (a
step emits the accepted draft tokens plus the target's own). Top-1 agreement with the target
(teacher-forced): {acc['top1_agreement']:.3f}; chained drafts 2..{len(acc['chain_agreement'])} (earlier ones fed the
target's tokens): {', '.join(f'{x:.3f}' for x in acc['chain_agreement'][1:])}. {acc['literal_check']}.

| k | tokens per step | P(position i accepted given earlier ones accepted), i = 1..k |
| --- | --- | --- |
{rows}
"""
    (out / "README.md").write_text(text)


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", type=Path, default=None,
                    help="training text (xz) from prepare_data.py; default .devcarry-data/default_model/train.txt.xz "
                         "(with --smoke: the held-out text)")
    ap.add_argument("--teacher", type=Path, default=ROOT / "models/default")
    ap.add_argument("--heldout", type=Path, default=HERE / "data/heldout.txt")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--acceptance-out", type=Path, default=None, help="default OUT/acceptance.json")
    ap.add_argument("--aux-layers", default="1,3,5", help="target layers whose outputs feed fc")
    ap.add_argument("--draft-vocab", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=None, help="the head's SwiGLU width (default: the target's)")
    ap.add_argument("--ttt-steps", type=int, default=6, help="training-time-test unroll")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-seconds", type=float, default=150)
    ap.add_argument("--deadline-seconds", type=float, default=270,
                    help="training stops early enough that the whole script ends by then")
    ap.add_argument("--reserve-seconds", type=float, default=60, help="time kept for export and measurement")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--max-k", type=int, default=6)
    ap.add_argument("--literal-check", type=int, default=4, help="prompts simulated step by step as a check")
    ap.add_argument("--smoke", action="store_true", help="short CPU run that checks the control flow")
    args = ap.parse_args()
    if args.smoke:  # smaller defaults; options given explicitly still win
        ap.set_defaults(seq=64, batch=2, train_seconds=5, reserve_seconds=0, prompts=4, prompt_tokens=16,
                        new_tokens=12, literal_check=2)
        args = ap.parse_args()
    if args.train is None and not args.smoke:
        args.train = ROOT / ".devcarry-data/default_model/train.txt.xz"
    acc_out = args.acceptance_out or args.out / "acceptance.json"
    aux_layers = [int(x) for x in args.aux_layers.split(",")]

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    tok = D.load_tokenizer(args.teacher, args.smoke)
    teacher, tc = D.load_teacher(args.teacher, device)
    vocab = tc["vocab_size"]
    assert all(0 <= l < tc["num_hidden_layers"] for l in aux_layers), aux_layers
    log(f"teacher {args.teacher}: {sum(p.numel() for p in teacher.parameters()) / 1e6:.2f}M parameters, {tc}")

    held_text = args.heldout.read_text(encoding="utf-8")
    if args.train is not None:
        text, docs = T.load_docs(args.train)
    else:  # smoke: the held-out text stands in for training text
        text = held_text
        docs = [d for d in text.split("\n\n") if d.strip()]
    if args.smoke and args.train is None:
        docs = docs[:20]
    log(f"{len(docs)} training documents, {len(text) / 1e6:.1f} MB")
    stream = T.build_stream(tok, docs, T.chat_samples(docs, rng, 0.03))
    log(f"training stream: {len(stream) / 1e6:.2f}M tokens")
    held_ids = T.encode_one(tok, held_text if not args.smoke else held_text[:3000])

    vocab_ids, counts = draft_vocabulary(stream, vocab, args.draft_vocab)
    total = sum(counts)
    coverage = {n: sum(sorted(counts, reverse=True)[:n]) / total for n in (1024, 2048, 3072, 4096)}
    stream_coverage = sum(counts[i] for i in vocab_ids) / total
    log(f"draft vocabulary {len(vocab_ids)}: {100 * stream_coverage:.2f}% of the stream's tokens "
        f"(top 1024/2048/3072/4096: {', '.join(f'{100 * v:.2f}%' for v in coverage.values())})")

    args.ffn = args.ffn or tc["intermediate_size"]
    c = head_config(tc, args)
    aux_width = len(aux_layers) * tc["hidden_size"]
    max_pos = max(tc["max_position_embeddings"], args.seq + args.ttt_steps)
    head = Eagle3Head(c, aux_width, vocab_ids, vocab, max_pos).to(device)
    n_params = sum(p.numel() for p in head.parameters())
    macs = macs_per_token(tc, c, aux_width, len(vocab_ids))
    log(f"head: {n_params / 1e6:.2f}M parameters, {c}; weight MACs per token: "
        + ", ".join(f"{k} {v / 1e6:.2f}M" for k, v in macs.items()))

    opt = T.make_optimizer(head, args.lr, device)
    stream = stream.to(device)
    amp = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")
    batch = T.make_batcher(stream, args.seq, args.batch, device)
    embed = teacher.model.embed_tokens
    weights = [0.8 ** j for j in range(args.ttt_steps)]
    n_held = max(1, min(16, (len(held_ids) - 1) // args.seq))
    held_x = torch.tensor(held_ids[:n_held * args.seq], device=device).view(n_held, args.seq)

    def ttt_losses(x):
        """Per step: the loss and the agreement of the head's argmax with the target's."""
        W = x.shape[1]
        with amp:
            with torch.no_grad():
                logits, aux = teacher.forward_layers(x, aux_layers)
                logits = logits.float()
                best = logits.argmax(-1)                               # [B, W] target ids
                p = F.softmax(logits[..., head.vocab_ids], -1)          # over the draft vocabulary
                ok = head.t2d[best]
            hs = head.ttt(torch.cat(aux, -1), x, embed, args.ttt_steps)
            out = []
            for j, h in enumerate(hs):
                n = W - 1 - j  # indices t < n: step j guesses x[t + j + 2], the target's at t + j + 1
                logp = F.log_softmax(head.logits(h[:, :n]).float(), -1)
                m = ok[:, j + 1:].float()
                ce = -(p[:, j + 1:] * logp).sum(-1)
                loss = (ce * m).sum() / m.sum().clamp(min=1)
                agree = (head.vocab_ids[logp.argmax(-1)] == best[:, j + 1:]).float().mean()
                out.append((loss, agree))
        return out

    def train_step(x):
        out = ttt_losses(x)
        sum(w * l for w, (l, _) in zip(weights, out)).backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out

    @torch.no_grad()
    def held_agreement():
        head.eval()
        r = [round(a.item(), 4) for _, a in ttt_losses(held_x)]
        head.train()
        return r

    head.train()
    train_step(batch()[0])
    if device == "cuda":
        torch.cuda.synchronize()
    budget = min(args.train_seconds, args.deadline_seconds - (time.time() - T.T0) - args.reserve_seconds)
    log(f"warm; training for {budget:.0f}s")
    step, tokens = 0, 0
    t_start = time.time()
    last_log, out = t_start, None
    while True:
        frac = (time.time() - t_start) / budget if budget > 0 else 1.0
        if frac >= 1.0 and step > 0:
            break
        lr = T.lr_at(args.lr, step, frac)
        for g in opt.param_groups:
            g["lr"] = lr
        x, _ = batch()
        out = train_step(x)
        step += 1
        tokens += x.numel()
        if time.time() - last_log > 20 or step == 10:
            last_log = time.time()
            log(f"step {step} loss {' '.join(f'{l.item():.3f}' for l, _ in out)} agree "
                f"{' '.join(f'{a.item():.3f}' for _, a in out)} held {held_agreement()} lr {lr:.2e} "
                f"{tokens / (time.time() - t_start) / 1e6:.2f}M tok/s, {tokens / len(stream):.1f} epochs")
    train_seconds = time.time() - t_start
    final_held = held_agreement()
    final_loss = [round(l.item(), 4) for l, _ in out]
    log(f"done: {step} steps, {tokens / 1e6:.1f}M tokens in {train_seconds:.0f}s, final losses {final_loss}, "
        f"held-out agreement per step {final_held}")

    # ---- export: bf16 weights, I64 d2t, BOOL t2d; evaluate exactly those in float32
    torch.backends.cuda.matmul.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")
    head.eval()
    state = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).detach().contiguous().cpu()
             for k, v in head.state_dict().items()}
    T.save_safetensors(state, args.out / "model.safetensors")
    (args.out / "config.json").write_text(json.dumps(hf_config(c, tc, len(vocab_ids), aux_layers), indent=2) + "\n")
    saved = D.load_safetensors(args.out / "model.safetensors")
    assert set(saved) == set(state) and all(torch.equal(saved[k], state[k]) for k in ("d2t", "t2d"))
    ref = Eagle3Head(c, aux_width, vocab_ids, vocab, max_pos).to(device)
    ref.load_state_dict({k: (v.float() if v.is_floating_point() else v) for k, v in saved.items()})
    ref.eval()

    acc = measure_acceptance(teacher, ref, aux_layers, held_ids, args.prompts, args.prompt_tokens,
                             args.new_tokens, args.max_k, device, args.literal_check)
    acc["head"] = {"parameters": n_params, "config": c, "aux_layers": aux_layers,
                   "draft_vocab_size": len(vocab_ids), "draft_vocab_stream_coverage": round(stream_coverage, 4),
                   "weight_macs_per_token": macs}
    acc["teacher"] = {"path": str(args.teacher)}
    acc_out.parent.mkdir(parents=True, exist_ok=True)
    acc_out.write_text(json.dumps(acc, indent=1) + "\n")
    print(json.dumps(acc, indent=1), flush=True)

    info = {"device_name": torch.cuda.get_device_name() if device == "cuda" else "CPU", "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d"), "steps": step, "batch": args.batch, "seq": args.seq,
            "tokens": tokens, "seconds": train_seconds, "stream_tokens": len(stream), "lr": args.lr,
            "seed": args.seed, "ttt_steps": args.ttt_steps, "final_losses": final_loss,
            "held_agreement": final_held, "aux_layers": aux_layers, "aux_width": aux_width,
            "draft_vocab": len(vocab_ids), "stream_coverage": stream_coverage,
            "stream_coverage_top": {str(k): round(v, 4) for k, v in coverage.items()},
            "smoke": args.smoke, "total_seconds": round(time.time() - T.T0, 1)}
    write_readme(args.out, c, tc, n_params, info, acc, macs, args.teacher)
    (args.out / "train_eagle3.json").write_text(json.dumps(info, indent=1) + "\n")
    log(f"finished: {args.out}")


if __name__ == "__main__":
    main()
