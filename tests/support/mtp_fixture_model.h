// The model a tests/fixtures/mtp/*.json fixture describes (scripts/ref/mtp_fixtures.py):
// written by make_model with the fixture's options and its config overrides, the target's
// final norm set to the fixture's weights (make-model writes ones, which would leave the
// MTP layer's input norm unseen). For the CPU layer's reference test and the CUDA layer's
// comparison with it.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/half.h"
#include "formats/make_model.h"
#include "support/paths.h"
#include "support/rewrite_safetensors.h"

namespace keel::test {

inline nlohmann::json mtp_fixture(const std::string &name) {
  std::ifstream f(fixtures_dir() / "mtp" / name);
  if (!f) throw std::runtime_error("tests/fixtures/mtp/" + name + ": missing");
  return nlohmann::json::parse(f);
}

// Writes the fixture's model into `out` (replaced). `dtype`: the weights' instead of the
// fixture's (bf16: a device computes with the very weights the CPU does; the final norm is
// rounded to bf16 values then too).
inline void make_mtp_fixture_model(const nlohmann::json &fx, const std::filesystem::path &out,
                                   std::optional<DType> dtype = std::nullopt) {
  const auto &m = fx["make_model"];
  MakeModelOptions o;
  o.arch = m["arch"];
  o.shape = m["shape"];
  o.layers = m["layers"].get<std::int64_t>();
  o.mtp_layers = m["mtp_layers"];
  o.dtype = dtype ? *dtype : (m["dtype"] == "f32" ? DType::kF32 : DType::kBF16);
  o.seed = m["seed"];
  if (m.contains("q_lora_rank")) o.q_lora_rank = m["q_lora_rank"].get<std::int64_t>();
  o.out = out;
  o.threads = 2;
  std::filesystem::remove_all(o.out);
  make_model(o);
  if (fx.contains("config_overrides")) {  // merged as the reference did into its copy
    nlohmann::json cfg;
    {
      std::ifstream in(out / "config.json");
      cfg = nlohmann::json::parse(in);
    }
    for (const auto &[k, v] : fx["config_overrides"].items()) cfg[k] = v;
    std::ofstream(out / "config.json") << cfg.dump(2);
  }
  std::vector<float> final_norm = fx["final_norm"].get<std::vector<float>>();
  if (o.dtype == DType::kBF16)
    for (float &v : final_norm) v = bf16_to_f32(f32_to_bf16(v));
  rewrite_safetensors(out / "model.safetensors", [&](const std::string &name, StoredTensor &t) {
    if (name == "model.norm.weight") set_f32_values(t, final_norm);
    return true;
  });
}

}  // namespace keel::test
