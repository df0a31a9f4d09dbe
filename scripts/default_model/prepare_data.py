#!/usr/bin/env python3
"""Build the English prose corpus for keel's built-in default model.

Every byte of text comes from Debian 12 packages, fetched with `apt-get download`
(nothing is installed) and unpacked with `dpkg-deb -x` into a work folder:

  * narrative prose: Jane Austen's six novels (r-cran-janeaustenr, an R data
    package; read with the small R-serialization reader below), the King James
    Bible (bible-kjv-text, decoded by the package's own `bible` program, run from
    the unpacked bible-kjv package), Bierce's Devil's Dictionary and the Jargon
    File (dictd databases), the fortune cookies (fortunes);
  * documentation prose: the Debian Administrator's Handbook, Debian Reference,
    Developer's Reference, the Debian FAQ (HTML), the Python 3.11 manuals (HTML),
    the PostgreSQL 15 manual (HTML), perl's own pod manuals (perl-doc) and the
    Linux kernel's documentation (linux-doc-6.1, HTML, translations left out).

The text is cut into paragraphs, cleaned (markup removed, typographic punctuation
mapped to ASCII, whitespace normalised), filtered to natural-language paragraphs
(mostly alphabetic words, little code punctuation, ends like a sentence),
deduplicated across the whole corpus, grouped into documents of a few KB, and
split: about 1% of the documents (chosen by a hash of their id, so the split is
stable) are held out for perplexity.

Outputs
  <train-out>/train.txt.xz   training text (documents separated by a blank line,
                             paragraphs by one newline); NOT committed: it travels
                             to the GPU machine through the run tool's `carry`.
  <data-dir>/heldout.txt     held-out text, same layout (committed).
  <data-dir>/heldout_slice.txt  the first ~6 KB of it, cut at a paragraph (committed,
                             used by tests/model/default_model_test.cpp).
  <data-dir>/sources.json    package names, versions, per-source sizes, hashes.

Usage: python3 scripts/default_model/prepare_data.py [--work /tmp/keel-dm-data]
       [--train-out .devcarry/default_model] [--data-dir scripts/default_model/data]
Needs: apt-get (Debian 12 sources), dpkg-deb, xz; no root needed for the download
if the work folder is writable.
"""

import argparse
import gzip
import hashlib
import html.parser
import json
import lzma
import os
import re
import subprocess
import sys
import unicodedata
import zlib
from pathlib import Path

PACKAGES = [
    "r-cran-janeaustenr",
    "bible-kjv-text",
    "bible-kjv",
    "dict-devil",
    "dict-jargon",
    "fortunes",
    "debian-handbook",
    "debian-reference-en",
    "developers-reference",
    "debian-faq",
    "python3.11-doc",
    "postgresql-doc-15",
    "perl-doc",
    "linux-doc-6.1",
]

HELDOUT_PER_MILLE = 10  # 1% of documents
DOC_TARGET_CHARS = 6000  # documents are runs of paragraphs of about this size
SLICE_CHARS = 6000

# ---------------------------------------------------------------- download


def fetch_packages(work: Path) -> dict:
    debs = work / "debs"
    root = work / "root"
    debs.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    missing = [p for p in PACKAGES if not list(debs.glob(f"{p}_*.deb"))]
    if missing:
        subprocess.run(["apt-get", "download", *missing], cwd=debs, check=True)
    versions = {}
    for p in PACKAGES:
        (deb,) = sorted(debs.glob(f"{p}_*.deb"))
        fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version"], check=True,
                                capture_output=True, text=True).stdout
        info = dict(line.split(": ", 1) for line in fields.strip().splitlines())
        versions[info["Package"]] = {"version": info["Version"], "deb": deb.name,
                                     "sha256": hashlib.sha256(deb.read_bytes()).hexdigest()}
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return versions


# ---------------------------------------------------------------- cleaning

_PUNCT_MAP = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
    "\u2013": "-", "\u2014": " - ", "\u2012": "-", "\u2010": "-", "\u2011": "-", "\u2212": "-",
    "\u2026": "...", "\u00a0": " ", "\u2009": " ", "\u200b": "", "\u00ad": "", "\ufeff": "",
    "\u2022": "", "\u00b7": " ",
})
_WORD_RE = re.compile(r"^[\"'(\[]*[A-Za-z][A-Za-z'\-]*[.,;:!?\"')\]]*$")
_CODEY = set("{}[]<>=|\\/_#$@*~^`%&")


def clean(par: str) -> str:
    par = unicodedata.normalize("NFC", par).translate(_PUNCT_MAP)
    return re.sub(r"\s+", " ", par).strip()


def is_prose(par: str) -> bool:
    """Natural-language paragraph: enough words, mostly alphabetic, little code."""
    if len(par) < 40 or len(par) > 20000:
        return False
    if sum(1 for c in par if ord(c) > 127) > 0.02 * len(par):
        return False  # another script, or mojibake
    if sum(1 for c in par if c in _CODEY) > 0.02 * len(par):
        return False
    words = par.split(" ")
    if len(words) < 7:
        return False
    if sum(1 for w in words if _WORD_RE.match(w)) < 0.8 * len(words):
        return False
    if not par[0].isalpha() and par[0] not in "\"'(":
        return False
    return par[-1] in ".!?\"')"


# ---------------------------------------------------------------- sources
# Each source yields (doc_key, [paragraphs]) for one file or one book.


class _HtmlText(html.parser.HTMLParser):
    BLOCK = {"p", "div", "li", "ul", "ol", "dd", "dt", "dl", "h1", "h2", "h3", "h4", "h5", "h6",
             "br", "tr", "td", "th", "table", "blockquote", "section", "title", "hr", "body",
             "caption", "figure", "article", "header", "footer", "main", "aside"}
    SKIP = {"script", "style", "pre", "head", "nav", "table", "math", "svg", "object"}
    # Matched against each class/id/role word, so a page-wide class such as Sphinx's
    # "wy-body-for-nav" does not hide the whole page.
    SKIP_CLASS = re.compile(r"nav\w*|navheader|navfooter|\w*sidebar\w*|related|footer|header|"
                            r"toc\w*|breadcrumbs?|highlight\S*|synopsis|programlisting|screen|"
                            r"literallayout|headerlink|wy-nav-side|wy-side\S*|wy-nav-top|"
                            r"rst-versions|rst-footer-buttons")
    VOID = {"br", "hr", "img", "meta", "link", "input", "area", "base", "col", "wbr", "source"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []  # [(tag, skipping)]
        self.pars = []
        self.cur = []

    def _skipping(self):
        return bool(self.stack) and self.stack[-1][1]

    def _flush(self):
        if self.cur:
            self.pars.append("".join(self.cur))
            self.cur = []

    def handle_starttag(self, tag, attrs):
        if tag in self.BLOCK:
            self._flush()
        if tag in self.VOID:
            return
        cls = " ".join(v or "" for k, v in attrs if k in ("class", "id", "role"))
        skip = (self._skipping() or tag in self.SKIP or
                any(self.SKIP_CLASS.fullmatch(w) for w in cls.split()))
        self.stack.append((tag, skip))

    def handle_endtag(self, tag):
        if tag in self.BLOCK:
            self._flush()
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        if not self._skipping():
            self.cur.append(data)


def html_paragraphs(path: Path):
    p = _HtmlText()
    try:
        p.feed(path.read_text(encoding="utf-8", errors="replace"))
        p.close()
    except Exception:  # malformed page: keep what was parsed
        pass
    p._flush()
    return p.pars


def src_html(root: Path, pattern: str, name: str):
    for f in sorted(root.glob(pattern)):
        if f.name in ("genindex.html", "search.html", "bookindex.html") or "genindex" in f.name:
            continue
        if "/translations/" in str(f) or "/_sources/" in str(f):
            continue
        yield f"{name}:{f.relative_to(root)}", html_paragraphs(f)


_POD_CODE = re.compile(r"[A-Z]<(?:<+\s(.*?)\s>+|([^<>]*))>")


def pod_text(s: str) -> str:
    for _ in range(4):
        s2 = _POD_CODE.sub(lambda m: (m.group(1) or m.group(2) or "").split("|")[0], s)
        if s2 == s:
            break
        s = s2
    return s


def src_pod(root: Path):
    for f in sorted(root.glob("usr/share/perl/*/pod/*.pod")):
        pars = []
        for block in re.split(r"\n\s*\n", f.read_text(encoding="utf-8", errors="replace")):
            if not block or block[0] in " \t=":  # verbatim code or a pod command
                continue
            pars.append(pod_text(block))
        yield f"perl-doc:{f.name}", pars


def src_fortunes(root: Path):
    for f in sorted((root / "usr/share/games/fortunes").iterdir()):
        if f.suffix or not f.is_file() or "art" in f.name:
            continue
        cookies = f.read_text(encoding="utf-8", errors="replace").split("\n%\n")
        yield f"fortunes:{f.name}", cookies


def _dictd_entries(dz: Path, index: Path):
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def num(s):
        n = 0
        for c in s:
            n = n * 64 + b64.index(c)
        return n

    data = gzip.decompress(dz.read_bytes())
    for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00"):
            continue
        off, ln = num(parts[1]), num(parts[2])
        yield parts[0], data[off:off + ln].decode("utf-8", errors="replace")


def src_dictd(root: Path, name: str):
    d = root / "usr/share/dictd"
    pars = []
    for head, body in _dictd_entries(d / f"{name}.dict.dz", d / f"{name}.index"):
        lines = body.splitlines()[1:]  # the first line repeats the headword
        for block in re.split(r"\n\s*\n", "\n".join(lines)):
            pars.append(block.replace("_", ""))
    # One key per 200 paragraphs, so the held-out split can take some of each.
    for i in range(0, len(pars), 200):
        yield f"{name}:{i // 200}", pars[i:i + 200]


def src_kjv(root: Path):
    bible = root / "usr/bin/bible"
    out = subprocess.run([str(bible), "-p", str(root / "usr/lib"), "-l100000", "Gen1:1-Rev22:21"],
                         check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout
    book, chapter, verses = None, None, []
    books = {}
    for line in out.splitlines():
        m = re.match(r"^(\S.*?) (\d+)$", line)
        if m:
            if verses:
                books.setdefault(book, []).append(" ".join(verses))
            book, chapter, verses = m.group(1), m.group(2), []
            continue
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            verses.append(m.group(1))
    if verses:
        books.setdefault(book, []).append(" ".join(verses))
    for b, chapters in books.items():
        yield f"kjv:{b}", chapters


def _r_unserialize(buf: bytes):
    """The subset of R's XDR serialization that character-vector data objects use."""
    pos = 0
    refs = []

    def i32():
        nonlocal pos
        v = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
        pos += 4
        return v

    def item():
        nonlocal pos
        flags = i32()
        t = flags & 0xFF
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if t in (254, 253, 242):  # NILVALUE, EMPTYENV, ... : no payload
            return None
        if t == 255:  # REFSXP
            idx = flags >> 8
            return refs[(idx if idx else i32()) - 1]
        if t == 1:  # SYMSXP
            name = item()
            refs.append(name)
            return name
        if t == 9:  # CHARSXP
            n = i32()
            if n == -1:
                return None
            s = buf[pos:pos + n].decode("utf-8", errors="replace")
            pos += n
            return s
        if t in (2, 6):  # LISTSXP, LANGSXP: attr, tag, car, cdr
            if has_attr:
                item()
            if has_tag:
                item()
            car = item()
            cdr = item()
            return [car] + (cdr if isinstance(cdr, list) else [])
        if t in (10, 13):  # LGLSXP, INTSXP
            n = i32()
            v = [i32() for _ in range(n)]
        elif t == 14:  # REALSXP
            n = i32()
            pos += 8 * n
            v = None
        elif t in (16, 19, 20):  # STRSXP, VECSXP, EXPRSXP
            n = i32()
            v = [item() for _ in range(n)]
        else:
            raise ValueError(f"R type {t} not supported")
        if has_attr:
            item()
        return v

    assert buf[:2] == b"X\n", "not XDR serialization"
    pos = 2
    version = i32()
    i32(), i32()
    if version == 3:
        n = i32()
        pos += n
    return item()


def src_austen(root: Path):
    rdb = next(root.glob("usr/lib/R/site-library/janeaustenr/data/Rdata.rdb")).read_bytes()
    pos = 0
    while pos < len(rdb):
        d = zlib.decompressobj()
        raw = d.decompress(rdb[pos + 4:])
        pos = len(rdb) - len(d.unused_data)
        obj = _r_unserialize(raw)
        if not (isinstance(obj, list) and obj and all(isinstance(x, (str, type(None))) for x in obj)):
            continue  # the data frame version repeats the books; take the plain vectors
        lines = [x or "" for x in obj]
        title = next((x for x in lines if x.strip()), "book").strip()
        pars, cur = [], []
        for line in lines:
            if line.strip():
                cur.append(line)
            elif cur:
                pars.append(" ".join(cur))
                cur = []
        if cur:
            pars.append(" ".join(cur))
        for i in range(0, len(pars), 100):
            yield f"austen:{title}:{i // 100}", pars[i:i + 100]


def all_sources(root: Path):
    yield "r-cran-janeaustenr", src_austen(root)
    yield "bible-kjv-text", src_kjv(root)
    yield "dict-devil", src_dictd(root, "devil")
    yield "dict-jargon", src_dictd(root, "jargon")
    yield "fortunes", src_fortunes(root)
    yield "debian-handbook", src_html(root, "usr/share/doc/debian-handbook/html/en-US/*.html",
                                      "debian-handbook")
    yield "debian-reference-en", src_html(root, "usr/share/debian-reference/*.en.html",
                                          "debian-reference")
    yield "developers-reference", src_html(root, "usr/share/developers-reference/**/*.html",
                                           "developers-reference")
    yield "debian-faq", src_html(root, "usr/share/doc/debian/FAQ/**/*.html", "debian-faq")
    yield "python3.11-doc", src_html(root, "usr/share/doc/python3.11/html/**/*.html", "python-doc")
    yield "postgresql-doc-15", src_html(root, "usr/share/doc/postgresql-doc-15/html/*.html",
                                        "postgresql-doc")
    yield "perl-doc", src_pod(root)
    yield "linux-doc-6.1", src_html(root, "usr/share/doc/linux-doc-6.1/html/**/*.html", "linux-doc")


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = Path(__file__).resolve().parent
    ap.add_argument("--work", type=Path, default=Path("/tmp/keel-dm-data"))
    ap.add_argument("--train-out", type=Path, default=here.parents[1] / ".devcarry/default_model")
    ap.add_argument("--data-dir", type=Path, default=here / "data")
    args = ap.parse_args()

    versions = fetch_packages(args.work)
    root = args.work / "root"
    seen = set()
    train_docs, held_docs = [], []
    stats = {}
    for pkg, docs in all_sources(root):
        st = stats.setdefault(pkg, {"paragraphs_in": 0, "paragraphs_kept": 0, "chars_kept": 0})
        for key, pars in docs:
            kept = []
            for raw in pars:
                st["paragraphs_in"] += 1
                par = clean(raw)
                if not is_prose(par):
                    continue
                sig = hashlib.sha1(re.sub(r"[^a-z0-9]", "", par.lower()).encode()).digest()
                if sig in seen:
                    continue
                seen.add(sig)
                kept.append(par)
                st["paragraphs_kept"] += 1
                st["chars_kept"] += len(par) + 1
            # Group the file's paragraphs into documents of about DOC_TARGET_CHARS.
            doc, size, n = [], 0, 0
            for par in kept + [None]:
                if par is None or (size + len(par) > DOC_TARGET_CHARS and doc):
                    if doc:
                        doc_id = f"{key}#{n}"
                        h = int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:4], "big")
                        (held_docs if h % 1000 < HELDOUT_PER_MILLE else train_docs).append("\n".join(doc))
                        n += 1
                    doc, size = [], 0
                if par is not None:
                    doc.append(par)
                    size += len(par) + 1
        print(f"{pkg:22s} kept {st['paragraphs_kept']:7d}/{st['paragraphs_in']:7d} paragraphs, "
              f"{st['chars_kept'] / 1e6:6.2f} MB", file=sys.stderr)

    train_text = "\n\n".join(train_docs) + "\n"
    held_text = "\n\n".join(held_docs) + "\n"
    args.train_out.mkdir(parents=True, exist_ok=True)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    with lzma.open(args.train_out / "train.txt.xz", "wt", encoding="utf-8", preset=6) as f:
        f.write(train_text)
    (args.data_dir / "heldout.txt").write_text(held_text, encoding="utf-8")
    # The slice: whole paragraphs from the start of the held-out text.
    slice_pars, size = [], 0
    for par in held_text.split("\n"):
        if size + len(par) > SLICE_CHARS and slice_pars:
            break
        slice_pars.append(par)
        size += len(par) + 1
    (args.data_dir / "heldout_slice.txt").write_text("\n".join(slice_pars).strip("\n") + "\n",
                                                    encoding="utf-8")
    manifest = {
        "packages": versions,
        "sources": stats,
        "train": {"documents": len(train_docs), "chars": len(train_text),
                  "sha256": hashlib.sha256(train_text.encode()).hexdigest()},
        "heldout": {"documents": len(held_docs), "chars": len(held_text),
                    "sha256": hashlib.sha256(held_text.encode()).hexdigest()},
        "heldout_per_mille": HELDOUT_PER_MILLE,
    }
    (args.data_dir / "sources.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"train: {len(train_docs)} docs, {len(train_text) / 1e6:.1f} MB; "
          f"held-out: {len(held_docs)} docs, {len(held_text) / 1e3:.0f} KB", file=sys.stderr)


if __name__ == "__main__":
    main()
