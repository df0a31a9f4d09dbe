// The error a config.json gets from parse_hf_config, for the config tests of the MoE
// architectures (qwen3_moe / mixtral, glm4_moe, gpt_oss).
#pragma once

#include <nlohmann/json.hpp>
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

}  // namespace keel::test
