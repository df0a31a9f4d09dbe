// The error a config.json gets from parse_hf_config, for the config tests of the MoE
// architectures (qwen3_moe / mixtral, glm4_moe, gpt_oss).
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>

#include "core/error.h"
#include "formats/model_config.h"

namespace keel::test {

// The error parse_hf_config throws for `j`, with its code; kInternal "no error" if none.
inline std::pair<ErrorCode, std::string> parse_error(const nlohmann::json &j) {
  try {
    parse_hf_config(j.dump(), "config.json");
  } catch (const Error &e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::kInternal, "no error"};
}

// One bad value of one config.json field, and the error it must get.
struct BadField {
  const char *field;
  nlohmann::json value;
  ErrorCode code;
  const char *expect;  // a part of the message
};

// Each case's field set in a copy of `base` must fail with its code, a message naming
// what it expects, and the file name first.
inline void expect_bad_fields(const nlohmann::json &base, std::span<const BadField> cases) {
  for (const BadField &c : cases) {
    nlohmann::json j = base;
    j[c.field] = c.value;
    const auto [code, what] = parse_error(j);
    EXPECT_EQ(code, c.code) << c.field << ": " << what;
    EXPECT_NE(what.find(c.expect), std::string::npos) << c.field << ": " << what;
    EXPECT_EQ(what.rfind("config.json", 0), 0u) << what;
  }
}

}  // namespace keel::test
