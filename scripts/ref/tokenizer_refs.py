#!/usr/bin/env python3
"""Reference token ids and HF tokenizers' encode speed on a mixed-text corpus.

  make-corpus OUT            build the corpus here from files on a Debian machine
                             (prose from /usr/share/doc, C++ and Python source,
                             generated CJK / emoji lines); deterministic.
  refs CORPUS OUTDIR NAME=TOKENIZER_JSON...
                             on the GPU machine (HF tokenizers 0.23): writes
                             OUTDIR/NAME.ids (int32 little-endian, the whole corpus
                             encoded as one string, no special tokens) and
                             OUTDIR/hf_bench.json (single-thread encode MB/s, whole
                             text and line by line).
"""
import glob
import json
import os
import random
import sys
import time


def make_corpus(out):
    parts = []
    budget = {"prose": 1_300_000, "code": 1_000_000, "py": 400_000}

    def take(files, limit):
        got, n = [], 0
        for f in files:
            try:
                with open(f, encoding="utf-8") as fh:
                    t = fh.read()
            except (UnicodeDecodeError, OSError):
                continue
            got.append(t)
            n += len(t.encode())
            if n >= limit:
                break
        return "".join(got)

    parts.append(take(sorted(glob.glob("/usr/share/doc/*/copyright")), budget["prose"]))
    parts.append(take(sorted(glob.glob("/usr/include/c++/12/bits/*.h")), budget["code"]))
    parts.append(take(sorted(glob.glob("/usr/lib/python3*/[a-m]*.py")), budget["py"]))
    rng = random.Random(1234)
    cjk = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
    kana = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)]
    hangul = [chr(c) for c in range(0xAC00, 0xAC00 + 2000)]
    emoji = [chr(c) for c in range(0x1F600, 0x1F650)] + [chr(c) for c in range(0x1F300, 0x1F380)]
    emoji += ["\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F44D\U0001F3FD", "\u2764\uFE0F", "\U0001F1EF\U0001F1F5"]
    punct = ["，", "。", "、", "！", "？", "「", "」", " ", "\n"]
    lines = []
    size = 0
    while size < 450_000:
        kind = rng.random()
        n = rng.randint(5, 60)
        if kind < 0.4:
            s = "".join(rng.choice(cjk) if rng.random() > 0.08 else rng.choice(punct) for _ in range(n))
        elif kind < 0.6:
            s = "".join(rng.choice(kana) if rng.random() > 0.1 else rng.choice(cjk) for _ in range(n))
        elif kind < 0.75:
            s = " ".join("".join(rng.choice(hangul) for _ in range(rng.randint(1, 5))) for _ in range(n // 4 + 1))
        else:
            words = ["hello", "world", "naïve", "café", "déjà", "vu", "the", "model", "says", "42", "3.14"]
            s = " ".join(rng.choice(words) + (rng.choice(emoji) if rng.random() < 0.5 else "") for _ in range(n // 3 + 1))
        lines.append(s)
        size += len(s.encode()) + 1
    parts.append("\n".join(lines) + "\n")
    text = "\n".join(parts)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"{out}: {len(text.encode())} bytes")


def refs(corpus, outdir, specs):
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["RAYON_RS_NUM_CPUS"] = "1"
    import array
    import platform
    import tokenizers
    with open(corpus, encoding="utf-8") as fh:
        text = fh.read()
    nbytes = len(text.encode())
    lines = text.splitlines(keepends=True)
    os.makedirs(outdir, exist_ok=True)
    report = {"tokenizers_version": tokenizers.__version__, "corpus_bytes": nbytes,
              "cpu": platform.processor() or platform.machine(), "results": {}}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    report["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for spec in specs:
        name, path = spec.split("=", 1)
        tok = tokenizers.Tokenizer.from_file(path)
        ids = tok.encode(text, add_special_tokens=False).ids
        array.array("i", ids).tofile(open(os.path.join(outdir, name + ".ids"), "wb"))
        whole = []
        for _ in range(3):
            t0 = time.perf_counter()
            tok.encode(text, add_special_tokens=False)
            whole.append(time.perf_counter() - t0)
        per_line = []
        for _ in range(2):
            t0 = time.perf_counter()
            for line in lines:
                tok.encode(line, add_special_tokens=False)
            per_line.append(time.perf_counter() - t0)
        report["results"][name] = {
            "tokens": len(ids),
            "whole_text_MBps": nbytes / min(whole) / 1e6,
            "line_by_line_MBps": nbytes / min(per_line) / 1e6,
            "whole_text_seconds": whole,
            "line_by_line_seconds": per_line,
        }
        print(name, json.dumps(report["results"][name]))
    with open(os.path.join(outdir, "hf_bench.json"), "w") as fh:
        json.dump(report, fh, indent=2)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "make-corpus":
        make_corpus(sys.argv[2])
    elif len(sys.argv) >= 5 and sys.argv[1] == "refs":
        refs(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        print(__doc__)
        sys.exit(2)
