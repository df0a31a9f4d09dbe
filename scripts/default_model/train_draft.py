#!/usr/bin/env python3
"""Train a small draft model for keel's default model (speculative decoding), by distillation.

Runs on the GPU machine (Python 3.12, torch 2.11, tokenizers 0.23, transformers 5.x; no network)
in one call, stopping by wall clock. Reuses train.py's Llama, data loading, optimizer, schedule
and export helpers:

  1. loads the default model (the teacher, models/default: model.safetensors bf16, config.json)
     into train.py's Llama, frozen, and its tokenizer (tokenizer.json, unchanged: the draft has
     exactly the teacher's vocabulary and special tokens);
  2. trains a smaller Llama (default 2 layers, hidden 256, 4/2 heads of 64, SwiGLU 768, tied
     embeddings, 1024 positions) with loss (1-a) * cross-entropy on the data
     + a * KL(teacher || draft) at temperature 1, bf16 autocast, AdamW, warm-up + cosine decay
     over the wall-clock budget (as train.py);
  3. writes an HF directory: model.safetensors (bf16), config.json, generation_config.json,
     tokenizer.json, tokenizer_config.json (the last three copied from the teacher), README.md,
     and checks with transformers (when importable) that it computes the training code's logits;
  4. measures greedy acceptance on held-out text: for N windows of 64 held-out tokens after
     <|bos|>, the teacher continues greedily for 128 tokens; greedy speculative decoding with
     k drafted tokens (k = 1..6) is simulated: each step the draft proposes k tokens greedily,
     the accepted count is the longest prefix equal to the teacher's tokens, and the teacher's
     next token is appended (a step emits accepted + 1 tokens). Because accepted tokens are the
     teacher's own, the draft's proposals along the way are its teacher-forced argmaxes, so one
     forward of the draft over each teacher continuation gives every step (a literal
     step-by-step simulation on a few prompts checks this). Written to acceptance.json.

Usage (GPU machine):
  python3 scripts/default_model/train_draft.py --train .devcarry/default_model/train.txt.xz \\
      --teacher models/default --out $OUT/draft --train-seconds 150 --deadline-seconds 330
Smoke test on a CPU (tiny draft, a few steps, held-out text as training text unless --train is
given; without the `tokenizers` package it reads the teacher's tokenizer.json in plain Python,
JsonBpeTokenizer below, slow but the same ids):
  python3 scripts/default_model/train_draft.py --smoke --out /tmp/draft-smoke
"""

import argparse
import json
import math
import random
import re
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train as T  # noqa: E402 - train.py beside this file
from train import BOS_ID, log  # noqa: E402

HERE = T.HERE
ROOT = HERE.parents[1]
SAFETENSORS_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
                      "I64": torch.int64, "BOOL": torch.bool}


def load_safetensors(path):
    """Reads a safetensors file (8-byte header length, JSON header, raw data) without the
    `safetensors` package: BF16, F16, F32, I64 and BOOL tensors."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    base, out = 8 + n, {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        dt = SAFETENSORS_DTYPES[h["dtype"]]
        buf = bytearray(raw[base + a:base + b])
        t = torch.frombuffer(buf, dtype=torch.uint8) if b > a else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(dt).reshape(h["shape"]).clone()
    return out


def load_teacher(path, device):
    c = json.loads((path / "config.json").read_text())
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
            "initializer_range")
    c = {k: c[k] for k in keys}
    model = T.Llama(c)
    state = load_safetensors(path / "model.safetensors")
    state.pop("lm_head.weight", None)  # tied
    model.load_state_dict({k: v.float() for k, v in state.items()})
    model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, c


class JsonBpeTokenizer:
    """The teacher's tokenizer.json in plain Python, for CPU smoke tests where `tokenizers` is
    missing: byte-level BPE (train.py's tokenizer: GPT-2 split, no normalizer), added tokens
    split out of the text. Without the `regex` module the split's letter / number classes are
    approximated with `re` (the same on ASCII). Answers what train.py and this file ask of a
    `tokenizers.Tokenizer`."""

    class _Encoding:
        def __init__(self, ids):
            self.ids = ids

    def __init__(self, path):
        j = json.loads(Path(path).read_text(encoding="utf-8"))
        m = j["model"]
        assert m["type"] == "BPE" and j["normalizer"] is None and j["pre_tokenizer"]["type"] == "ByteLevel"
        self.vocab = m["vocab"]
        self.ranks = {tuple(x) if isinstance(x, list) else tuple(x.split(" ", 1)): i
                      for i, x in enumerate(m["merges"])}
        self.added = {t["content"]: t["id"] for t in j["added_tokens"]}
        self.inv = {i: t for t, i in self.vocab.items()}
        self.inv.update({i: t for t, i in self.added.items()})
        bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))  # GPT-2's byte map
        rest = [b for b in range(256) if b not in bs]
        self.byte_char = {b: chr(c) for b, c in zip(bs + rest, bs + [256 + n for n in range(len(rest))])}
        self.char_byte = {c: b for b, c in self.byte_char.items()}
        try:
            import regex
            self.split = regex.compile(
                r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
        except ImportError:
            self.split = re.compile(
                r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:(?![^\W\d_]|\d)\S)+|\s+(?!\S)|\s+""")
        self.specials = re.compile(
            "(" + "|".join(re.escape(t) for t in sorted(self.added, key=len, reverse=True)) + ")")
        self.cache = {}

    def get_vocab_size(self):
        return max(self.inv) + 1

    def token_to_id(self, token):
        return self.added.get(token, self.vocab.get(token))

    def _bpe(self, piece):
        word = tuple(self.byte_char[b] for b in piece.encode("utf-8"))
        while len(word) > 1:
            pairs = [(self.ranks.get(p, math.inf), i) for i, p in enumerate(zip(word, word[1:]))]
            rank, i = min(pairs)
            if rank == math.inf:
                break
            a, b = word[i], word[i + 1]
            out, j = [], 0
            while j < len(word):  # merge every occurrence of (a, b), left to right
                if j + 1 < len(word) and word[j] == a and word[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(word[j])
                    j += 1
            word = tuple(out)
        return [self.vocab[w] for w in word]

    def encode_ids(self, text):
        ids = []
        for part in self.specials.split(text):
            if part in self.added:
                ids.append(self.added[part])
                continue
            for piece in self.split.findall(part):
                if piece not in self.cache:
                    self.cache[piece] = self._bpe(piece)
                ids += self.cache[piece]
        return ids

    def encode_batch(self, texts, add_special_tokens=False):
        assert not add_special_tokens
        return [self._Encoding(self.encode_ids(t)) for t in texts]

    def decode(self, ids, skip_special_tokens=False):
        out, raw = [], bytearray()
        for i in ids:
            t = self.inv[i]
            if i in self.added.values():
                out.append(raw.decode("utf-8", "replace"))
                raw = bytearray()
                if not skip_special_tokens:
                    out.append(t)
            else:
                raw += bytes(self.char_byte[c] for c in t)
        return "".join(out) + raw.decode("utf-8", "replace")


def load_tokenizer(path, smoke):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        if not smoke:
            raise
        log("`tokenizers` missing: the plain-Python reader of tokenizer.json (smoke test only)")
        tok = JsonBpeTokenizer(path / "tokenizer.json")
        assert tok.token_to_id("<|bos|>") == BOS_ID and tok.token_to_id("<|eos|>") == T.EOS_ID
        return tok
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    assert tok.token_to_id("<|bos|>") == BOS_ID and tok.token_to_id("<|eos|>") == T.EOS_ID
    return tok


# ---------------------------------------------------------------- acceptance


@torch.no_grad()
def teacher_greedy(teacher, prompts, n_new, device, batch=256):
    """Greedy continuations (recomputing the whole prefix each token; all prompts have one length)."""
    outs = []
    for i in range(0, len(prompts), batch):
        ids = torch.tensor(prompts[i:i + batch], device=device)
        for _ in range(n_new):
            nxt = teacher(ids)[:, -1].float().argmax(-1)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
        outs.append(ids[:, -n_new:].cpu())
    return torch.cat(outs)


def simulate(match, k, by_state=False):
    """match[p]: the draft's teacher-forced argmax equals the teacher's token p (a draft model:
    its a-th draft from state p is that at p + a); with by_state, match[a][p]: the a-th draft
    proposed at state p (p tokens of the continuation known) is the teacher's token p + a (a
    head whose chained drafts depend on where the chain starts). Returns (steps, tokens,
    per-position [tried, accepted]) for greedy speculative decoding with k drafts."""
    n, p, steps, pos = len(match[0] if by_state else match), 0, 0, [[0, 0] for _ in range(k)]
    while p < n:
        k_eff = min(k, n - p)  # no drafting past the teacher's last token
        a = 0
        while a < k_eff:
            pos[a][0] += 1
            if not (match[a][p] if by_state else match[p + a]):
                break
            pos[a][1] += 1
            a += 1
        p += min(a + 1, n - p)
        steps += 1
    return steps, n, pos


@torch.no_grad()
def literal_steps(draft, prompt, cont, k, device):
    """Step-by-step greedy speculative decoding (the draft recomputes its prefix for every token)."""
    prefix, p, steps, n = list(prompt), 0, 0, len(cont)
    while p < n:
        ids = list(prefix)
        proposal = []
        for _ in range(min(k, n - p)):
            nxt = int(draft(torch.tensor([ids], device=device))[0, -1].float().argmax())
            proposal.append(nxt)
            ids.append(nxt)
        a = 0
        while a < len(proposal) and proposal[a] == cont[p + a]:
            a += 1
        e = min(a + 1, n - p)
        prefix += cont[p:p + e]
        p += e
        steps += 1
    return steps


def tabulate(matches, max_k, by_state=False):
    """acceptance.json's "k": for k = 1..max_k, tokens per step and per-position acceptance over
    the prompts' match lists (simulate's, one per prompt)."""
    out = {}
    for k in range(1, max_k + 1):
        steps, toks, pos = 0, 0, [[0, 0] for _ in range(k)]
        for m in matches:
            s, t, ps = simulate(m, k, by_state)
            steps, toks = steps + s, toks + t
            for i in range(k):
                pos[i][0] += ps[i][0]
                pos[i][1] += ps[i][1]
        out[str(k)] = {
            "tokens_per_step": round(toks / steps, 4), "steps": steps,
            "position_acceptance": [round(a / t, 4) if t else None for t, a in pos]}
    return out


@torch.no_grad()
def measure_acceptance(teacher, draft, held_ids, n_prompts, prompt_len, n_new, max_k, device, n_literal):
    t0 = time.time()
    span = len(held_ids) - prompt_len
    starts = sorted(set(int(i * span / n_prompts) for i in range(n_prompts)))
    prompts = [[BOS_ID] + held_ids[s:s + prompt_len] for s in starts]
    cont = teacher_greedy(teacher, prompts, n_new, device)  # [N, n_new]
    full = torch.cat([torch.tensor(prompts), cont], dim=1).to(device)
    L = len(prompts[0])
    pred = []
    for i in range(0, len(full), 256):  # the draft's argmax after each prefix prompt + cont[:p]
        pred.append(draft(full[i:i + 256])[:, L - 1:-1].float().argmax(-1).cpu())
    match = (torch.cat(pred) == cont).tolist()
    result = {
        "definition": "greedy speculative decoding simulated against the teacher's greedy continuation: "
                      "each step the draft proposes k tokens greedily, accepted = longest prefix equal to the "
                      "teacher's tokens, then the teacher's next token is appended (a step emits accepted+1 "
                      "tokens, capped at the tokens left; no drafting past the last one). "
                      "tokens_per_step = all emitted tokens / all steps. position_acceptance[i] = "
                      "P(draft token i accepted | tokens < i accepted). EOS does not stop generation.",
        "prompts": len(prompts), "prompt_tokens": prompt_len, "new_tokens": n_new,
        "prompt_source": "held-out text, evenly spaced windows, each after <|bos|>",
        "top1_agreement": round(sum(map(sum, match)) / (len(match) * n_new), 4),
        "k": tabulate(match, max_k),
    }
    # The shortcut (one teacher-forced draft pass) against literal step-by-step drafting.
    agree = 0
    n_lit = min(n_literal, len(prompts))
    for j in range(n_lit):
        c = cont[j].tolist()
        agree += literal_steps(draft, prompts[j], c, max_k, device) == simulate(match[j], max_k)[0]
    result["literal_check"] = f"{agree}/{n_lit} prompts: literal k={max_k} simulation gives the same step count"
    result["seconds"] = round(time.time() - t0, 1)
    return result


# ---------------------------------------------------------------- README


def write_readme(out, c, n_params, info, acc, teacher_dir):
    k = acc["k"]
    rows = "\n".join(f"| {kk} | {v['tokens_per_step']:.3f} | " + ", ".join(f"{x:.3f}" for x in v["position_acceptance"]
                                                                       if x is not None) + " |"
                     for kk, v in k.items())
    text = f"""# Draft model for keel's default model

A {n_params / 1e6:.2f}M-parameter Llama (LlamaForCausalLM layout) distilled from keel's built-in
default model (`{teacher_dir}`), for speculative decoding: `keel serve --speculative draft:PATH`.
It has exactly the default model's tokenizer (`tokenizer.json`, `tokenizer_config.json` and
`generation_config.json` are copies), 8192 tokens, the same special tokens.

| | |
| --- | --- |
| architecture | Llama: {c['num_hidden_layers']} layers, hidden {c['hidden_size']}, {c['num_attention_heads']} query heads / {c['num_key_value_heads']} KV heads, head dim {c['head_dim']}, SwiGLU {c['intermediate_size']}, RMSNorm eps {c['rms_norm_eps']}, RoPE theta {c['rope_theta']:g}, tied embeddings |
| context | {c['max_position_embeddings']} positions |
| weights | `model.safetensors`, bf16, {n_params:,} parameters |

## Training

`scripts/default_model/train_draft.py` on {info['device_name']} (torch {info['torch']}), {info['date']}:
{info['steps']} steps of {info['batch']} x {info['seq']} tokens ({info['tokens'] / 1e6:.0f}M tokens) in {info['seconds']:.0f} s,
on the default model's training text (`scripts/default_model/prepare_data.py`; stream of
{info['stream_tokens'] / 1e6:.2f}M tokens). Loss = {1 - info['distill_weight']:g} x cross-entropy on the data
+ {info['distill_weight']:g} x KL(teacher || draft) at temperature 1, teacher frozen; bf16 autocast, AdamW
(lr {info['lr']:g}, betas 0.9/0.95, weight decay 0.1), 150 warm-up steps and a cosine decay to 10%
over the wall-clock budget, dropout {info['dropout']:g}; embeddings from a fixed random init (seed {info['seed']}).
Final training losses: cross-entropy {info['final_ce']:.3f}, KL {info['final_kl']:.3f}; held-out loss {info['held_loss']:.3f}.

Held-out perplexity (`scripts/default_model/data/heldout.txt`, context {info['ppl_context']}, the windowing of
`scripts/default_model/PERPLEXITY.md`, float32 on the bf16 weights): draft {info['ppl_draft']:.2f}, teacher {info['ppl_teacher']:.2f}.
{info['hf_check']}

## Acceptance (greedy)

`acceptance.json`: {acc['prompts']} windows of {acc['prompt_tokens']} held-out tokens after `<|bos|>`; the teacher
continues greedily for {acc['new_tokens']} tokens; greedy speculative decoding with k drafted tokens is
simulated against those tokens (a step emits the accepted draft tokens plus the teacher's own).
Top-1 agreement with the teacher (teacher-forced): {acc['top1_agreement']:.3f}.

| k | tokens per step | P(position i accepted given earlier ones accepted), i = 1..k |
| --- | --- | --- |
{rows}
"""
    (out / "README.md").write_text(text)


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", type=Path, default=None,
                    help="training text (xz) from prepare_data.py; default .devcarry/default_model/train.txt.xz "
                         "(with --smoke: the held-out text)")
    ap.add_argument("--teacher", type=Path, default=ROOT / "models/default")
    ap.add_argument("--heldout", type=Path, default=HERE / "data/heldout.txt")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--acceptance-out", type=Path, default=None, help="default OUT/acceptance.json")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--max-pos", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--distill-weight", type=float, default=0.5, help="a in (1-a)*CE + a*KL(teacher||draft)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-seconds", type=float, default=150)
    ap.add_argument("--deadline-seconds", type=float, default=330,
                    help="training stops early enough that the whole script ends by then")
    ap.add_argument("--reserve-seconds", type=float, default=70, help="time kept for export and measurement")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--max-k", type=int, default=6)
    ap.add_argument("--literal-check", type=int, default=4, help="prompts simulated step by step as a check")
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run that checks the control flow")
    args = ap.parse_args()
    if args.smoke:
        args.hidden, args.layers, args.heads, args.kv_heads, args.head_dim, args.ffn = 32, 1, 2, 1, 16, 64
        args.seq, args.batch, args.train_seconds, args.reserve_seconds = 64, 2, 5, 0
        args.prompts, args.prompt_tokens, args.new_tokens, args.literal_check = 4, 16, 12, 2
    if args.train is None and not args.smoke:
        args.train = ROOT / ".devcarry/default_model/train.txt.xz"
    acc_out = args.acceptance_out or args.out / "acceptance.json"

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    tok = load_tokenizer(args.teacher, args.smoke)
    teacher, tc = load_teacher(args.teacher, device)
    vocab = tc["vocab_size"]
    log(f"teacher {args.teacher}: {sum(p.numel() for p in teacher.parameters()) / 1e6:.2f}M parameters, {tc}")

    held_text = args.heldout.read_text(encoding="utf-8")
    if args.train is not None:
        text, docs = T.load_docs(args.train)
    else:  # smoke: the held-out text stands in for training text
        text = held_text
        docs = [d for d in text.split("\n\n") if d.strip()]
    if args.smoke:
        docs = docs[:20]
    log(f"{len(docs)} training documents, {len(text) / 1e6:.1f} MB")
    stream = T.build_stream(tok, docs, T.chat_samples(docs, rng, 0.03))
    log(f"training stream: {len(stream) / 1e6:.2f}M tokens")
    held_ids = T.encode_one(tok, held_text if not args.smoke else held_text[:3000])

    c = {
        "vocab_size": vocab, "hidden_size": args.hidden, "intermediate_size": args.ffn,
        "num_hidden_layers": args.layers, "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads, "head_dim": args.head_dim,
        "max_position_embeddings": args.max_pos, "rms_norm_eps": tc["rms_norm_eps"],
        "rope_theta": tc["rope_theta"], "initializer_range": 0.02,
    }
    assert args.seq <= args.max_pos <= tc["max_position_embeddings"]
    draft = T.Llama(c, args.dropout).to(device)  # fixed random init (seed above)
    n_params = sum(p.numel() for p in draft.parameters())
    log(f"draft: {n_params / 1e6:.2f}M parameters, config {c}")

    opt = T.make_optimizer(draft, args.lr, device)
    step_fn = T.maybe_compile(draft, device)
    teach_fn = T.maybe_compile(teacher, device)
    stream = stream.to(device)
    held_eval = torch.tensor(held_ids[: 64 * args.seq], device=device)
    amp = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")
    batch = T.make_batcher(stream, args.seq, args.batch, device)
    a = args.distill_weight

    def losses(x, y, fn, tfn):
        with amp:
            with torch.no_grad():
                t_logp = F.log_softmax(tfn(x).float().view(-1, vocab), -1)
            d_logp = F.log_softmax(fn(x).float().view(-1, vocab), -1)
            ce = F.nll_loss(d_logp, y.reshape(-1))
            kl = (t_logp.exp() * (t_logp - d_logp)).sum(-1).mean()
        return ce, kl

    def train_step(x, y):
        ce, kl = losses(x, y, step_fn, teach_fn)
        ((1 - a) * ce + a * kl).backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return ce, kl

    @torch.no_grad()
    def held_loss():
        draft.eval()
        n = max(1, (len(held_eval) - 1) // args.seq)
        L = min(args.seq, len(held_eval) - 1)
        x = held_eval[: n * L].view(n, L)
        y = held_eval[1: n * L + 1].view(n, L)
        with amp:  # eager: an eval-mode call of the compiled model would recompile it
            l = F.cross_entropy(draft(x).float().view(-1, vocab), y.reshape(-1)).item()
        draft.train()
        return l

    draft.train()
    x, y = batch()
    try:
        train_step(x, y)
    except Exception as e:  # noqa: BLE001
        if step_fn is draft and teach_fn is teacher:
            raise
        log(f"compiled step failed ({type(e).__name__}: {e}); eager")
        step_fn, teach_fn = draft, teacher
        opt.zero_grad(set_to_none=True)
        train_step(x, y)
    if device == "cuda":
        torch.cuda.synchronize()
    budget = min(args.train_seconds, args.deadline_seconds - (time.time() - T.T0) - args.reserve_seconds)
    log(f"compiled/warm; training for {budget:.0f}s")
    warmup, step, tokens = 150, 0, 0
    t_start = time.time()
    last_log, ce, kl = t_start, None, None
    while True:
        frac = (time.time() - t_start) / budget if budget > 0 else 1.0
        if frac >= 1.0 and step > 0:
            break
        lr = T.lr_at(args.lr, step, frac, warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch()
        ce, kl = train_step(x, y)
        step += 1
        tokens += x.numel()
        if time.time() - last_log > 20 or step == 10:
            last_log = time.time()
            log(f"step {step} ce {ce.item():.3f} kl {kl.item():.3f} held {held_loss():.3f} lr {lr:.2e} "
                f"{tokens / (time.time() - t_start) / 1e6:.2f}M tok/s, {tokens / len(stream):.1f} epochs")
    train_seconds = time.time() - t_start
    final_held = held_loss()
    log(f"done: {step} steps, {tokens / 1e6:.1f}M tokens in {train_seconds:.0f}s, final ce {ce.item():.3f} "
        f"kl {kl.item():.3f}, held-out loss {final_held:.3f}")

    # ---- export: bf16 weights; evaluate exactly those in float32
    torch.backends.cuda.matmul.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")
    draft.eval()
    state = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in draft.state_dict().items()}
    T.save_safetensors(state, args.out / "model.safetensors")
    ref = T.Llama(c).to(device)
    ref.load_state_dict({k: v.float() for k, v in state.items()})
    ref.eval()
    (args.out / "config.json").write_text(json.dumps(T.hf_config(c), indent=2) + "\n")
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        src = args.teacher / name
        if src.exists():
            shutil.copyfile(src, args.out / name)
    tcfg = json.loads((args.out / "tokenizer_config.json").read_text())
    if tcfg.get("model_max_length", 0) > args.max_pos:
        tcfg["model_max_length"] = args.max_pos
        (args.out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    try:
        T.transformers_check(args.out, ref, held_ids, device)
        hf_check = "Check: transformers' `LlamaForCausalLM.from_pretrained` on this directory gives the " \
                   "training code's logits (float32)."
    except Exception as e:  # noqa: BLE001
        log(f"transformers check failed: {type(e).__name__}: {e}")
        hf_check = f"The transformers reload check did not run ({type(e).__name__})."

    ctx = min(1024, args.max_pos)
    ppl_d, _ = T.perplexity(ref, held_ids, ctx, device)
    ppl_t, _ = T.perplexity(teacher, held_ids, ctx, device)
    log(f"held-out perplexity at context {ctx}: draft {ppl_d:.2f}, teacher {ppl_t:.2f}")

    acc = measure_acceptance(teacher, ref, held_ids, args.prompts, args.prompt_tokens, args.new_tokens,
                             args.max_k, device, args.literal_check)
    acc["draft"] = {"parameters": n_params, "held_out_ppl": round(ppl_d, 4), "config": c}
    acc["teacher"] = {"path": str(args.teacher), "held_out_ppl": round(ppl_t, 4)}
    acc_out.parent.mkdir(parents=True, exist_ok=True)
    acc_out.write_text(json.dumps(acc, indent=1) + "\n")
    print(json.dumps(acc, indent=1), flush=True)

    info = {"device_name": torch.cuda.get_device_name() if device == "cuda" else "CPU", "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d"), "steps": step, "batch": args.batch, "seq": args.seq,
            "tokens": tokens, "seconds": train_seconds, "stream_tokens": len(stream), "distill_weight": a,
            "lr": args.lr, "dropout": args.dropout, "seed": args.seed, "final_ce": ce.item(),
            "final_kl": kl.item(), "held_loss": final_held, "ppl_context": ctx, "ppl_draft": ppl_d,
            "ppl_teacher": ppl_t, "hf_check": hf_check}
    write_readme(args.out, c, n_params, info, acc, args.teacher)
    (args.out / "train_draft.json").write_text(json.dumps(info, indent=1) + "\n")
    log(f"finished: {args.out}")


if __name__ == "__main__":
    main()
