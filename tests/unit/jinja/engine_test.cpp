// What the jinja2 comparison cases cannot show: errors that name the template line,
// unsupported constructs, limits against runaway templates, Python number and string
// formatting corner cases, {% generation %}, concurrency, and loading chat templates.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "support/paths.h"
#include "text/jinja/chat_template.h"
#include "text/jinja/json_value.h"
#include "text/jinja/pystr.h"
#include "text/jinja/template.h"
#include "unit/formats/byte_builder.h"

namespace keel::jinja {
namespace {

using ojson = nlohmann::ordered_json;

std::string render(const std::string &src, const ojson &ctx = ojson::object(),
                   const RenderOptions &o = {}) {
  return Template(src).render(from_json(ctx), o);
}

// The Error a template raises (parse or render), or a test failure.
Error error_of(const std::string &src, const RenderOptions &o = {}) {
  try {
    render(src, ojson::object(), o);
  } catch (const Error &e) {
    return e;
  }
  ADD_FAILURE() << "no error for: " << src;
  return Error(ErrorCode::kInternal, "");
}

TEST(JinjaErrors, RuntimeErrorNamesTheLine) {
  Error e = error_of("line one\n{% set x = 1 %}\n  {{ 'a' + x }}\n");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("template line 3"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("can only concatenate str"), std::string::npos) << e.what();
}

TEST(JinjaErrors, SyntaxErrorNamesLineAndColumn) {
  Error e = error_of("a\nb\n{{ 1 + }}");
  EXPECT_NE(std::string(e.what()).find("template line 3, column 8"), std::string::npos) << e.what();
  e = error_of("{% for x in y %}\n{% endif %}");
  EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
}

TEST(JinjaErrors, UnsupportedConstructsAreNamedErrors) {
  struct Case {
    const char *src;
    const char *line;
  } cases[] = {
      {"ok\n{% include 'other.jinja' %}", "line 2"},
      {"{% extends 'base' %}", "line 1"},
      {"\n\n{% for x in [1] recursive %}{% endfor %}", "line 3"},
      {"x\n{{ 1|nosuchfilter }}", "line 2"},
      {"x\n{{ 1 is nosuchtest }}", "line 2"},
      {"{{ 'a'.encode() }}", "line 1"},
      {"{{ f(*args) }}", "line 1"},
  };
  for (const auto &c : cases) {
    Error e = error_of(c.src);
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << c.src << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.line), std::string::npos) << c.src << ": " << e.what();
  }
}

TEST(JinjaErrors, RaiseExceptionCarriesTheTemplatesMessage) {
  Error e = error_of(
      "{% if true %}\n{{ raise_exception('Conversation roles must alternate') }}{% endif %}");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos);
}

TEST(JinjaLimits, RunawayLoopsStopAtTheStepLimit) {
  RenderOptions o;
  o.limits.max_steps = 100000;
  auto start = std::chrono::steady_clock::now();
  Error e = error_of(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", o);
  EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(JinjaLimits, OutputAndStringGrowthAreBounded) {
  RenderOptions o;
  o.limits.max_output_bytes = 1 << 20;
  EXPECT_EQ(error_of("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", o).code(),
            ErrorCode::kResourceExhausted);
  EXPECT_EQ(error_of("{{ 'x' * 100000000000 }}", o).code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(error_of("{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s + "
                     "ns.s %}{% endfor %}",
                     o)
                .code(),
            ErrorCode::kResourceExhausted);
  EXPECT_EQ(error_of("{{ ([1] * 100000000000)|length }}", o).code(), ErrorCode::kResourceExhausted);
}

TEST(JinjaLimits, DeepNestingAndRecursionFailCleanly) {
  std::string parens(100000, '(');
  EXPECT_EQ(error_of("{{ " + parens + "1" + std::string(100000, ')') + " }}").code(),
            ErrorCode::kInvalidArgument);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_EQ(error_of(ifs).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_of("{{ " + std::string(100000, '-') + "1 }}").code(),
            ErrorCode::kInvalidArgument);
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += "+1";
  EXPECT_EQ(error_of(sum + " }}").code(), ErrorCode::kInvalidArgument);
  std::string chain = "{{ x";
  for (int i = 0; i < 100000; ++i) chain += i % 2 ? ".a" : "|trim";
  EXPECT_EQ(error_of(chain + " }}").code(), ErrorCode::kInvalidArgument);
  // A value nested by a loop: capped when built, so printing and freeing it stay shallow.
  Error deep = error_of(
      "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor "
      "%}");
  EXPECT_NE(std::string(deep.what()).find("nested deeper"), std::string::npos) << deep.what();
  Error e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(std::string(e.what()).find("recursion"), std::string::npos) << e.what();
}

TEST(JinjaErrors, InvalidUtf8TemplateIsRejected) {
  EXPECT_EQ(error_of(std::string("abc \xff\xfe {{ 1 }}")).code(), ErrorCode::kInvalidArgument);
}

TEST(PyFormat, FloatReprMatchesCPython) {
  EXPECT_EQ(py::repr_float(1e22), "1e+22");
  EXPECT_EQ(py::repr_float(1e16), "1e+16");
  EXPECT_EQ(py::repr_float(9999999999999998.0), "9999999999999998.0");
  EXPECT_EQ(py::repr_float(0.0001), "0.0001");
  EXPECT_EQ(py::repr_float(0.00001), "1e-05");
  EXPECT_EQ(py::repr_float(5e-324), "5e-324");
  EXPECT_EQ(py::repr_float(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(py::repr_float(-2.5), "-2.5");
  EXPECT_EQ(py::repr_float(100.0), "100.0");
  EXPECT_EQ(py::json_float(NAN), "NaN");
  EXPECT_EQ(py::json_float(-INFINITY), "-Infinity");
}

TEST(PyFormat, StringReprAndJsonEscapes) {
  EXPECT_EQ(py::repr_string("a'b"), "\"a'b\"");
  EXPECT_EQ(py::repr_string("a\x01\x7f\t"), "'a\\x01\\x7f\\t'");
  EXPECT_EQ(py::repr_string("zero\u200bwidth é"), "'zero\\u200bwidth é'");
  EXPECT_EQ(py::json_string("é\x01\x7f\"\\"), "\"é\\u0001\x7f\\\"\\\\\"");
}

TEST(JinjaRender, GenerationBlockRendersItsBody) {
  EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% set x = 2 %}{% endgeneration %}c[{{ x }}]"),
            "ab1c[]");
}

TEST(JinjaRender, OneTemplateRendersConcurrently) {
  Template t(
      "{% for m in messages %}{{ m.role }}:{{ m.content|trim }};{% endfor %}{{ strftime_now('%Y') "
      "}}");
  ojson ctx = {{"messages", ojson::array()}};
  for (int i = 0; i < 50; ++i)
    ctx["messages"].push_back({{"role", "user"}, {"content", " m" + std::to_string(i)}});
  Value v = from_json(ctx);
  RenderOptions o;
  std::tm tm{};
  tm.tm_year = 99;
  o.now = tm;
  std::string expected = t.render(v, o);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (t.render(v, o) != expected) ++bad;
    });
  for (auto &th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_NE(expected.find("1999"), std::string::npos);
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("keel_jinja_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  static int &counter() {
    static int n = 0;
    return n;
  }
  void write(const std::string &name, const std::string &text) const {
    std::ofstream(path / name) << text;
  }
};

TEST(ChatTemplateLoad, DirectoryPrefersChatTemplateJinjaAndReadsTokenObjects) {
  TempDir d;
  d.write(
      "tokenizer_config.json",
      R"({"bos_token": {"content": "<B>", "lstrip": false}, "eos_token": "<E>", "chat_template": "old"})");
  d.write("chat_template.jinja",
          "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}\n");
  ChatTemplate t = ChatTemplate::load(d.path);
  EXPECT_EQ(t.render(ojson::parse(R"([{"role": "user", "content": "hi"}])"), nullptr, false),
            "<B>hi<E>");
}

TEST(ChatTemplateLoad, NamedTemplatesPickToolUseWhenToolsAreGiven) {
  TempDir d;
  d.write("tokenizer_config.json", R"({"eos_token": "</s>", "chat_template": [
      {"name": "default", "template": "plain"}, {"name": "tool_use", "template": "tools={{ tools|length }}"}]})");
  ChatTemplate t = ChatTemplate::load(d.path / "tokenizer_config.json");
  ojson msgs = ojson::array();
  EXPECT_EQ(t.render(msgs, nullptr, false), "plain");
  EXPECT_EQ(t.render(msgs, ojson::parse(R"([{"type": "function"}])"), false), "tools=1");
}

TEST(ChatTemplateLoad, BadFilesAreNamedErrors) {
  TempDir d;
  try {
    ChatTemplate::load(d.path / "missing.jinja");
    ADD_FAILURE();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
  d.write("tokenizer_config.json", "{\"chat_template\": ");
  try {
    ChatTemplate::load(d.path);
    ADD_FAILURE();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos);
  }
  d.write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_THROW(ChatTemplate::load(d.path), Error);
  d.write("bad.jinja", "{% if %}");
  EXPECT_THROW(ChatTemplate::load(d.path / "bad.jinja"), Error);
}

TEST(ChatTemplateRender, KeepsTheClientsKeyOrderInTojson) {
  ChatTemplate t("{{ tools[0]|tojson }}", std::nullopt, std::nullopt);
  ojson tools = ojson::parse(R"([{"zeta": 1, "alpha": {"y": 2, "b": 3}}])");
  EXPECT_EQ(t.render(ojson::array(), tools, false), R"({"zeta": 1, "alpha": {"y": 2, "b": 3}})");
}

TEST(ChatTemplateRender, KwargsAndTokensReachTheTemplate) {
  ChatTemplate t(
      "{{ bos_token }}|{{ eos_token }}|{{ enable_thinking }}|{{ add_generation_prompt }}|{{ tools "
      "is none }}",
      "<s>", std::nullopt);
  EXPECT_EQ(t.render(ojson::array(), nullptr, true, ojson::parse(R"({"enable_thinking": false})")),
            "<s>||False|True|True");
}

// `keel template` prints exactly the reference rendering.
TEST(KeelTemplateCli, PrintsTheRenderedPrompt) {
  if (!std::filesystem::exists(test::keel_binary())) GTEST_SKIP() << "keel not built";
  TempDir d;
  d.write(
      "messages.json",
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]})");
  auto tpl = test::fixtures_dir() / "templates" / "src" / "Qwen-Qwen2.5-7B-Instruct.jinja";
  std::string cmd = test::keel_binary().string() + " template --model " + tpl.string() +
                    " --messages " + (d.path / "messages.json").string() +
                    " --add-generation-prompt > " + (d.path / "out").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(d.path / "out", std::ios::binary);
  std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(
      out,
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  std::string bad = test::keel_binary().string() + " template --model " + tpl.string() +
                    " --messages " + (d.path / "nope.json").string() + " 2> " +
                    (d.path / "err").string();
  EXPECT_NE(std::system(bad.c_str()), 0);
}

// `keel template --model file.gguf` reads tokenizer.chat_template and looks bos/eos up in
// the GGUF vocabulary.
TEST(KeelTemplateCli, RendersTheTemplateEmbeddedInAGguf) {
  if (!std::filesystem::exists(test::keel_binary())) GTEST_SKIP() << "keel not built";
  TempDir d;
  test::ByteBuilder b;
  b.raw("GGUF").put<std::uint32_t>(3).put<std::uint64_t>(0).put<std::uint64_t>(4);
  b.gstr("tokenizer.chat_template")
      .put<std::uint32_t>(8)
      .gstr(
          "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}{{ "
          "eos_token }}");
  b.gstr("tokenizer.ggml.tokens").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(3);
  b.gstr("<unk>").gstr("<s>").gstr("</s>");
  b.gstr("tokenizer.ggml.bos_token_id").put<std::uint32_t>(4).put<std::uint32_t>(1);
  b.gstr("tokenizer.ggml.eos_token_id").put<std::uint32_t>(4).put<std::uint32_t>(2);
  b.pad_to(32);
  d.write("m.gguf", b.bytes);
  d.write("messages.json", R"([{"role": "user", "content": "hi"}])");
  std::string cmd = test::keel_binary().string() + " template --model " +
                    (d.path / "m.gguf").string() + " --messages " +
                    (d.path / "messages.json").string() + " > " + (d.path / "out").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(d.path / "out", std::ios::binary);
  std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(out, "<s>user:hi</s>");
}

}  // namespace
}  // namespace keel::jinja
