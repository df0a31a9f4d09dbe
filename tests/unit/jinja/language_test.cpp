// The Jinja2 language, case by case: each template in
// tests/fixtures/templates/language.json renders to what jinja2 3.1 (configured as HF
// transformers configures it) rendered, or fails where jinja2 raised.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "support/paths.h"
#include "text/jinja/json_value.h"
#include "text/jinja/template.h"

namespace keel::jinja {
namespace {

using ojson = nlohmann::ordered_json;

ojson load_cases() {
  std::ifstream f(test::fixtures_dir() / "templates" / "language.json", std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ojson::parse(ss.str());
}

RenderOptions fixed_clock() {
  RenderOptions o;
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

// The variables HF passes besides the case's own context.
Value context_of(const ojson &c) {
  ojson ctx = c["context"];
  if (!ctx.contains("messages")) ctx["messages"] = ojson::array();
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = false;
  return from_json(ctx);
}

class LanguageCase : public testing::TestWithParam<int> {};

TEST_P(LanguageCase, MatchesJinja2) {
  static const ojson cases = load_cases();
  const ojson &c = cases["cases"][static_cast<size_t>(GetParam())];
  const std::string name = c["name"].get<std::string>();
  const std::string src = c["template"].get<std::string>();
  SCOPED_TRACE(name + ": " + src);
  if (c.contains("output")) {
    try {
      EXPECT_EQ(Template(src).render(context_of(c), fixed_clock()), c["output"].get<std::string>());
    } catch (const Error &e) {
      ADD_FAILURE() << "threw " << e.what();
    }
    return;
  }
  try {
    std::string out = Template(src).render(context_of(c), fixed_clock());
    ADD_FAILURE() << "rendered '" << out << "' but jinja2 raised " << c["error"].dump();
  } catch (const Error &e) {
    std::string what = e.what();
    EXPECT_NE(what.find("template"), std::string::npos) << what;
    if (c["error"]["type"].get<std::string>() == "TemplateError") {
      EXPECT_NE(what.find(c["error"]["message"].get<std::string>()), std::string::npos) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Jinja2, LanguageCase, testing::Range(0, static_cast<int>(load_cases()["cases"].size())),
    [](const testing::TestParamInfo<int> &info) {
      return load_cases()["cases"][static_cast<size_t>(info.param)]["name"].get<std::string>();
    });

}  // namespace
}  // namespace keel::jinja
