#include "grammar/maskbench_case.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "grammar/matcher.h"
#include "grammar/python_json.h"

namespace keel::grammar {

MaskBenchCase parse_maskbench_case(std::string_view text, const std::string &name) {
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception &e) {
    throw Error(ErrorCode::kInvalidArgument, name + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("schema") || !doc.contains("tests") ||
      !doc["tests"].is_array())
    throw Error(ErrorCode::kInvalidArgument, name + ": not a MaskBench case (schema, tests)");
  MaskBenchCase c;
  c.name = name;
  c.schema = doc["schema"];
  for (const auto &t : doc["tests"]) {
    if (!t.is_object() || !t.contains("data") || !t.contains("valid") || !t["valid"].is_boolean())
      throw Error(ErrorCode::kInvalidArgument, name + ": a test without data / valid");
    c.instances.push_back({t.value("description", std::string()), t["valid"].get<bool>(),
                           python_json_dumps(t["data"])});
  }
  return c;
}

MaskBenchCase load_maskbench_case(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kInvalidArgument, path.string() + ": cannot be read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_maskbench_case(ss.str(), path.filename().string());
}

InstanceOutcome walk_tokens(const std::shared_ptr<const CompiledGrammar> &grammar,
                            const std::vector<TokenId> &ids, std::vector<double> *mask_us) {
  using clock = std::chrono::steady_clock;
  InstanceOutcome out;
  out.tokens = ids.size();
  out.stopped_at = ids.size();
  GrammarMatcher m(grammar);
  TokenBitmask mask(grammar->vocab()->size());
  auto fill = [&] {
    const auto t0 = clock::now();
    m.fill_next_token_bitmask(mask);
    if (mask_us)
      mask_us->push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
  };
  for (std::size_t i = 0; i < ids.size(); ++i) {
    fill();
    const bool allowed = mask.test(ids[i]);
    const bool took = m.accept_token(ids[i]);
    if (allowed != took) out.mask_disagrees = true;
    if (!allowed || !took) {
      out.stopped_at = i;
      return out;
    }
  }
  fill();
  const auto &eos = grammar->vocab()->eos_ids();
  bool eos_allowed = eos.empty() ? m.is_complete() : false;
  for (TokenId e : eos) eos_allowed |= mask.test(e);
  if (eos_allowed != m.is_complete()) out.mask_disagrees = true;
  out.accepted = eos_allowed && m.is_complete();
  return out;
}

}  // namespace keel::grammar
