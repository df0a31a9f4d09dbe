#include "formats/fp8_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace keel {

namespace {

using nlohmann::json;

// [rows, cols] of positive integers at j[key]; `where` names the field in errors.
void read_block(const json &j, const char *key, const std::string &where, Fp8Config &c) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() ||
      !(*it)[1].is_number_integer() || (*it)[0].get<std::int64_t>() <= 0 ||
      (*it)[1].get<std::int64_t>() <= 0)
    throw Error(ErrorCode::kFormat,
                where + "." + key + ": expected [rows, cols] of positive integers");
  c.block_rows = (*it)[0].get<std::int64_t>();
  c.block_cols = (*it)[1].get<std::int64_t>();
}

}  // namespace

std::optional<Fp8Config> parse_fp8_config(const json &config, const std::string &origin) {
  const auto q = config.find("quantization_config");
  if (q == config.end() || !q->is_object()) return std::nullopt;
  const std::string where = origin + ": quantization_config";
  const auto method = q->find("quant_method");
  if (method == q->end() || !method->is_string()) return std::nullopt;
  Fp8Config c;
  c.method = method->get<std::string>();
  if (c.method == "fp8") {
    if (const auto fmt = q->find("fmt"); fmt != q->end() && fmt->is_string() && *fmt != "e4m3")
      throw Error(ErrorCode::kUnsupported,
                  where + ".fmt: " + fmt->get<std::string>() + " (keel reads e4m3 only)");
    c.strategy = q->contains("weight_block_size") && !(*q)["weight_block_size"].is_null()
                     ? "block"
                     : "tensor";
    read_block(*q, "weight_block_size", where, c);
    return c;
  }
  if (c.method != "compressed-tensors") return std::nullopt;
  const auto groups = q->find("config_groups");
  if (groups == q->end() || !groups->is_object()) return std::nullopt;
  for (auto g = groups->begin(); g != groups->end(); ++g) {
    if (!g->is_object() || !g->contains("weights") || !(*g)["weights"].is_object()) continue;
    const json &w = (*g)["weights"];
    const std::string at = where + ".config_groups." + g.key() + ".weights";
    if (w.value("type", std::string()) != "float") return std::nullopt;  // int formats: not FP8
    if (w.value("num_bits", 0) != 8)
      throw Error(ErrorCode::kUnsupported, at + ".num_bits: float weights of " +
                                               std::to_string(w.value("num_bits", 0)) +
                                               " bits (keel reads FP8 e4m3)");
    c.strategy = w.value("strategy", std::string("tensor"));
    if (c.strategy != "tensor" && c.strategy != "channel" && c.strategy != "block")
      throw Error(ErrorCode::kUnsupported,
                  at + ".strategy: " + c.strategy + " (keel reads tensor, channel and block)");
    read_block(w, "block_structure", at, c);
    return c;
  }
  return std::nullopt;
}

}  // namespace keel
