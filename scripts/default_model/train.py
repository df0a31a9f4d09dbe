#!/usr/bin/env python3
"""Train keel's built-in default model: a small Llama that writes English.

Runs on the GPU machine (Python 3.12, torch 2.11, tokenizers 0.23, transformers 5.x,
safetensors; no network) in one call, stopping by wall clock:

  1. trains a byte-level BPE tokenizer (HF `tokenizers`, GPT-2 style pre-tokenizer,
     no normalizer) on the training text made by prepare_data.py;
  2. trains a Llama-architecture model (this file's own ~60-line implementation,
     whose parameter names and maths are those of transformers' LlamaForCausalLM:
     RMSNorm, rotate-half RoPE, GQA, SwiGLU, tied embeddings) in bf16 autocast with
     AdamW and a warmup + cosine schedule over a fixed wall-clock budget;
  3. writes an HF model directory: model.safetensors (bf16), config.json,
     generation_config.json, tokenizer.json, tokenizer_config.json (with a chat
     template), then reloads it with transformers to check that transformers computes
     the same logits, and records the reference perplexities with it.

Perplexity, as `keel perplexity` must compute it (see PERPLEXITY.md beside this file):
the file's whole text is encoded without special tokens into ids t[0..n); it is cut
into consecutive, non-overlapping windows of N-1 ids (the last may be shorter); each
window is fed as [BOS] + window, so the model sees N positions at most; every id of
the window is scored (the first one from BOS alone); ppl = exp(sum NLL / n). The
reference runs in float32 on the bf16 weights that are saved.

Usage (GPU machine):
  python3 scripts/default_model/train.py --train .devcarry/default_model/train.txt.xz \
      --out $OUT/model --train-seconds 240 --deadline-seconds 420
Smoke test of the control flow on a CPU (tiny model, a few steps; without the
`tokenizers` package it falls back to a byte tokenizer and exports no tokenizer):
  python3 scripts/default_model/train.py --smoke --out /tmp/dm-smoke
"""

import argparse
import hashlib
import json
import lzma
import math
import os
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

T0 = time.time()
HERE = Path(__file__).resolve().parent
SPECIALS = ["<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|system|>"]
BOS_ID, EOS_ID = 0, 1
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|eos|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


# ---------------------------------------------------------------- tokenizer


def train_tokenizer(docs, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    assert tok.token_to_id("<|bos|>") == BOS_ID and tok.token_to_id("<|eos|>") == EOS_ID
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", BOS_ID)])
    return tok


class ByteTokenizer:
    """Smoke-test stand-in when `tokenizers` is missing: ids = bytes + len(SPECIALS)."""

    def get_vocab_size(self):
        return 256 + len(SPECIALS)

    def encode_ids(self, text):
        return [b + len(SPECIALS) for b in text.encode("utf-8")]

    def decode(self, ids):
        return bytes(i - len(SPECIALS) for i in ids if i >= len(SPECIALS)).decode("utf-8", "replace")


def encode_many(tok, texts):
    if isinstance(tok, ByteTokenizer):
        return [tok.encode_ids(t) for t in texts]
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def encode_one(tok, text):
    return encode_many(tok, [text])[0]


def decode(tok, ids):
    return tok.decode(ids) if isinstance(tok, ByteTokenizer) else tok.decode(ids, skip_special_tokens=False)


# ---------------------------------------------------------------- model


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):  # as transformers' LlamaRMSNorm: normalise in f32
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def causal_attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]  # old torch (the CPU smoke test): plain softmax attention
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s.softmax(-1) @ v


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        d = c["hidden_size"]
        self.q_proj = nn.Linear(d, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, d, bias=False)

    def forward(self, x, cos, sin):  # x [B, T, D]; cos, sin [T, hd]
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)  # [B, nh, T, hd]
        k = self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)  # [B, nkv, T, hd]
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv  # query head h reads kv head h // rep (transformers' repeat_kv)
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        y = causal_attention(q, k, v)  # [B, nh, T, hd]
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, f = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.drop = nn.Dropout(dropout)

    def forward(self, x, cos, sin):
        x = x + self.drop(self.self_attn(self.input_layernorm(x), cos, sin))
        return x + self.drop(self.mlp(self.post_attention_layernorm(x)))


class Body(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c, dropout) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Llama(nn.Module):
    """Parameter names equal transformers' LlamaForCausalLM's (lm_head tied to embed_tokens)."""

    def __init__(self, c, dropout=0.0):
        super().__init__()
        self.c = c
        self.model = Body(c, dropout)
        hd = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        freqs = torch.outer(torch.arange(c["max_position_embeddings"], dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)  # [P, hd]
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        std = c["initializer_range"]
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * c["num_hidden_layers"]) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
                nn.init.normal_(p, 0.0, s)

    def forward(self, ids):  # ids [B, T] -> logits [B, T, V]
        return self.forward_layers(ids, ())[0]

    def forward_layers(self, ids, layers):
        """The logits and the outputs of the decoder layers `layers` (the residual stream after
        each, [B, T, D]; what an EAGLE-3 head reads), in that order."""
        T = ids.shape[1]
        x = self.model.embed_tokens(ids)
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        kept = {}
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin)
            if i in layers:
                kept[i] = x
        x = self.model.norm(x)
        return x @ self.model.embed_tokens.weight.t(), [kept[i] for i in layers]


SAFETENSORS_NAMES = {torch.bfloat16: "BF16", torch.int64: "I64", torch.bool: "BOOL"}


def save_safetensors(state, path):
    """The safetensors layout (8-byte header length, JSON header, raw data): bf16 weights, and
    int64 / bool index tensors (an EAGLE-3 head's d2t, t2d); written here so the smoke test
    needs no `safetensors` package."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(state):
        t = state[name].contiguous()
        assert t.dtype in SAFETENSORS_NAMES, f"{name}: {t.dtype}"
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": SAFETENSORS_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------- evaluation


@torch.no_grad()
def perplexity(forward, ids, context, device):
    """The definition in this file's docstring: non-overlapping windows of context-1 ids after BOS."""
    n = context - 1
    windows = [ids[s:s + n] for s in range(0, len(ids), n)]
    total, count = 0.0, 0
    for i in range(0, len(windows), 16):
        group = windows[i:i + 16]
        L = max(len(w) for w in group)
        inp = torch.full((len(group), L + 1), EOS_ID, dtype=torch.long)
        tgt = torch.full((len(group), L), -100, dtype=torch.long)
        for j, w in enumerate(group):
            inp[j, 0] = BOS_ID
            inp[j, 1:len(w) + 1] = torch.tensor(w)
            tgt[j, :len(w)] = torch.tensor(w)
        logits = forward(inp.to(device))[:, :-1].float()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.to(device).reshape(-1),
                              ignore_index=-100, reduction="sum")
        total += nll.item()
        count += sum(len(w) for w in group)
    return math.exp(total / count), count


@torch.no_grad()
def greedy(forward, tok, prompt, n, device, max_pos):
    ids = [BOS_ID] + encode_one(tok, prompt)
    out = []
    for _ in range(n):
        logits = forward(torch.tensor([ids[-max_pos:]], device=device))[0, -1]
        nxt = int(logits.argmax())
        if nxt == EOS_ID:
            break
        ids.append(nxt)
        out.append(nxt)
    return decode(tok, out)


# ---------------------------------------------------------------- data


def chat_samples(docs, rng, fraction):
    """A few documents' first paragraphs as chat turns, so the template means something."""
    out = []
    for d in rng.sample(docs, int(len(docs) * fraction)):
        par = d.split("\n", 1)[0]
        cut = par.find(". ")
        if cut < 20 or cut > len(par) - 40:
            continue
        first, rest = par[:cut + 1], par[cut + 2:]
        out.append(f"<|user|>\nContinue this text: {first}<|eos|>\n<|assistant|>\n{rest}")
    return out


def load_docs(path):
    """The training text made by prepare_data.py (xz): documents are separated by blank lines."""
    with lzma.open(path, "rt", encoding="utf-8") as f:
        text = f.read()
    return text, [d for d in text.split("\n\n") if d.strip()]


def build_stream(tok, docs, chats):
    """[BOS] doc [EOS] for each document; chat samples are encoded with their special tokens."""
    import numpy as np
    parts = []
    for ids in encode_many(tok, docs):
        parts.append([BOS_ID] + ids + [EOS_ID])
    if chats and not isinstance(tok, ByteTokenizer):
        for e in tok.encode_batch(chats, add_special_tokens=False):
            parts.append([BOS_ID] + e.ids + [EOS_ID])
    random.Random(1).shuffle(parts)
    flat = np.fromiter((t for p in parts for t in p), dtype=np.int32)
    return torch.from_numpy(flat.astype("int64"))


def make_batcher(stream, seq, batch_size, device):
    """Random windows of seq+1 tokens from the stream (on device): returns (inputs, targets)."""
    offs = torch.arange(seq + 1, device=device)

    def batch():
        starts = torch.randint(0, len(stream) - seq - 1, (batch_size,), device=device)
        b = stream[starts[:, None] + offs]
        return b[:, :-1], b[:, 1:]
    return batch


# ---------------------------------------------------------------- training helpers


def make_optimizer(model, lr, device):
    """AdamW, betas 0.9/0.95, weight decay 0.1 on matrices only."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if device == "cuda" else {}))


def lr_at(base_lr, step, frac, warmup=150):
    """Linear warm-up over `warmup` steps, then cosine decay to 10% over the wall-clock fraction `frac`."""
    return base_lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def maybe_compile(model, device):
    """torch.compile on CUDA (with TF32 matmuls), the eager model otherwise or if compile is unavailable."""
    if device != "cuda":
        return model
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return torch.compile(model)
    except Exception as e:  # noqa: BLE001 - eager still trains
        log(f"torch.compile unavailable ({e}); eager")
        return model


def hf_config(c):
    """config.json for transformers' LlamaForCausalLM from this file's model config dict."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", **c,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
        "tie_word_embeddings": True, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
        "pad_token_id": EOS_ID, "use_cache": True,
        "torch_dtype": "bfloat16", "dtype": "bfloat16",
    }


def transformers_check(out, ref, held_ids, device):
    """Reload the directory `out` with transformers' LlamaForCausalLM in float32 and check that it
    computes the logits of `ref` (this file's Llama on the same weights); returns the HF model."""
    from transformers import LlamaForCausalLM
    hf = LlamaForCausalLM.from_pretrained(str(out), dtype=torch.float32).to(device).eval()
    probe = torch.tensor([[BOS_ID] + held_ids[:200]], device=device)
    diff = (hf(probe).logits - ref(probe)).abs().max().item()
    log(f"transformers vs own implementation: max |logit diff| {diff:.2e}")
    assert diff < 1e-3, "transformers computes other logits than the trained model"
    return hf


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", type=Path, default=HERE.parents[1] / ".devcarry/default_model/train.txt.xz")
    ap.add_argument("--heldout", type=Path, default=HERE / "data/heldout.txt")
    ap.add_argument("--slice", type=Path, default=HERE / "data/heldout_slice.txt")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=1152)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--train-seconds", type=float, default=240)
    ap.add_argument("--deadline-seconds", type=float, default=420,
                    help="training stops early enough that the whole script ends by then")
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run that checks the control flow")
    args = ap.parse_args()
    if args.smoke:
        args.vocab, args.hidden, args.layers, args.heads, args.kv_heads, args.ffn = 300, 64, 2, 4, 2, 128
        args.seq, args.batch, args.train_seconds = 64, 4, 5

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    rng = random.Random(0)
    args.out.mkdir(parents=True, exist_ok=True)

    text, docs = load_docs(args.train)
    if args.smoke:
        docs = docs[:200]
    log(f"{len(docs)} training documents, {len(text) / 1e6:.1f} MB")
    try:
        tok = train_tokenizer(docs, args.vocab)
    except ImportError:
        if not args.smoke:
            raise
        tok = ByteTokenizer()
    vocab = tok.get_vocab_size()
    log(f"tokenizer: {vocab} tokens")
    stream = build_stream(tok, docs, chat_samples(docs, rng, 0.03))
    log(f"training stream: {len(stream) / 1e6:.2f}M tokens")
    held_ids = encode_one(tok, args.heldout.read_text(encoding="utf-8"))

    c = {
        "vocab_size": vocab, "hidden_size": args.hidden, "intermediate_size": args.ffn,
        "num_hidden_layers": args.layers, "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads, "head_dim": args.hidden // args.heads,
        "max_position_embeddings": args.seq, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "initializer_range": 0.02,
    }
    model = Llama(c, args.dropout).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters, config {c}")

    opt = make_optimizer(model, args.lr, device)
    step_fn = maybe_compile(model, device)
    stream = stream.to(device)
    held_eval = torch.tensor(held_ids[: 64 * args.seq], device=device)
    amp = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")
    batch = make_batcher(stream, args.seq, args.batch, device)

    def train_step(x, y):
        with amp:
            logits = step_fn(x)
            loss = F.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    @torch.no_grad()
    def held_loss():
        model.eval()
        n = (len(held_eval) - 1) // args.seq
        x = held_eval[: n * args.seq].view(n, args.seq)
        y = held_eval[1: n * args.seq + 1].view(n, args.seq)
        with amp:  # eager: an eval-mode call of the compiled model would recompile it
            l = F.cross_entropy(model(x).float().view(-1, vocab), y.reshape(-1)).item()
        model.train()
        return l

    # First step compiles; fall back to eager if compilation fails.
    model.train()
    x, y = batch()
    try:
        train_step(x, y)
    except Exception as e:  # noqa: BLE001
        if step_fn is model:
            raise
        log(f"compiled step failed ({type(e).__name__}: {e}); eager")
        step_fn = model
        opt.zero_grad(set_to_none=True)
        train_step(x, y)
    if device == "cuda":
        torch.cuda.synchronize()
    budget = min(args.train_seconds, args.deadline_seconds - (time.time() - T0) - 75)
    log(f"compiled/warm; training for {budget:.0f}s")
    warmup, step, tokens = 150, 0, 0
    t_start = time.time()
    last_log, loss = t_start, None
    while True:
        frac = (time.time() - t_start) / budget
        if frac >= 1.0:
            break
        lr = lr_at(args.lr, step, frac, warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch()
        loss = train_step(x, y)
        step += 1
        tokens += x.numel()
        if time.time() - last_log > 20 or step == 10:
            last_log = time.time()
            log(f"step {step} loss {loss.item():.3f} held {held_loss():.3f} lr {lr:.2e} "
                f"{tokens / (time.time() - t_start) / 1e6:.2f}M tok/s, {tokens / len(stream):.1f} epochs")
    log(f"done: {step} steps, {tokens / 1e6:.0f}M tokens, final held-out loss {held_loss():.3f}")

    # ---- export: bf16 weights, and evaluate exactly those weights in float32
    # (true float32: TF32 matmuls would blur the reference and the logit check).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    model.eval()
    state = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()}
    save_safetensors(state, args.out / "model.safetensors")
    ref = Llama(c).to(device)
    ref.load_state_dict({k: v.float() for k, v in state.items()})
    ref.eval()
    config = hf_config(c)
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (args.out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": EOS_ID,
        "do_sample": True, "temperature": 0.7, "top_k": 40, "top_p": 0.9,
        "repetition_penalty": 1.1, "max_new_tokens": 128}, indent=2) + "\n")
    if not isinstance(tok, ByteTokenizer):
        tok.save(str(args.out / "tokenizer.json"))
    (args.out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|bos|>", "eos_token": "<|eos|>",
        "pad_token": "<|eos|>", "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False, "model_max_length": args.seq,
        "chat_template": CHAT_TEMPLATE}, indent=2) + "\n")

    forward = ref
    try:  # the reference figure comes from transformers itself when it loads the directory
        hf = transformers_check(args.out, ref, held_ids, device)
        forward = lambda ids: hf(ids).logits  # noqa: E731
        reference = "transformers LlamaForCausalLM, float32, on the saved bf16 weights"
    except Exception as e:  # noqa: BLE001 - keep the model; say which reference was used
        log(f"transformers check failed: {type(e).__name__}: {e}")
        reference = "train.py's own Llama, float32, on the saved bf16 weights (transformers failed)"
    try:
        from transformers import AutoTokenizer
        ht = AutoTokenizer.from_pretrained(str(args.out))
        same = ht(args.slice.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"] == \
            encode_one(tok, args.slice.read_text(encoding="utf-8"))
        log(f"transformers tokenizer: same ids as tokenizers: {same}; with special tokens: "
            f"{ht('Once upon a time')['input_ids']}")
        log("chat template: " + repr(ht.apply_chat_template(
            [{"role": "user", "content": "Hello"}], add_generation_prompt=True, tokenize=False)))
    except Exception as e:  # noqa: BLE001
        log(f"transformers tokenizer check failed: {type(e).__name__}: {e}")

    result = {"definition": "non-overlapping windows of (context-1) ids of the file's text, encoded "
                            "without special tokens; each window fed as [BOS]+window; every window id "
                            "scored; ppl = exp(total NLL / number of ids)",
              "reference": reference, "files": {}}
    for path, contexts in ((args.heldout, (128, 512, args.seq)), (args.slice, (64, 128, 512))):
        t = path.read_text(encoding="utf-8")
        ids = encode_one(tok, t)
        entry = {"sha256": hashlib.sha256(t.encode()).hexdigest(), "num_tokens": len(ids),
                 "first_ids": ids[:32], "ppl": {}}
        for ctx in sorted(set(min(x, args.seq) for x in contexts)):
            ppl, _ = perplexity(forward, ids, ctx, device)
            entry["ppl"][str(ctx)] = round(ppl, 4)
        result["files"][path.name] = entry
        log(f"perplexity {path.name}: {entry['ppl']} over {len(ids)} tokens")
    result["train"] = {"steps": step, "tokens": tokens, "seconds": round(time.time() - t_start, 1),
                       "parameters": n_params, "stream_tokens": len(stream), "device": device,
                       "torch": torch.__version__}
    (args.out / "perplexity_pytorch.json").write_text(json.dumps(result, indent=1) + "\n")

    for prompt in ("Once upon a time", "The house was quiet when", "Debian is", "She said that"):
        log(f"greedy {prompt!r} -> {greedy(forward, tok, prompt, 60, device, args.seq)!r}")
    log("finished")


if __name__ == "__main__":
    main()
