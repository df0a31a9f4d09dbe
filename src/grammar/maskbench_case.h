// One MaskBench test file (guidance-ai/jsonschemabench, maskbench/data/): a schema plus
// instances, each valid or not, and the check `keel grammar-check` runs on it: each
// instance, written as Python's json.dumps writes it and tokenized whole, walks the
// grammar's token masks; a valid one must reach an accepting end, an invalid one must
// be stopped (a token outside the mask, or no accepting end).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.h"

namespace keel {
class Tokenizer;
}

namespace keel::grammar {

struct MaskBenchInstance {
  std::string description;
  bool valid = false;
  std::string text;  // python_json_dumps(data)
};

struct MaskBenchCase {
  std::string name;  // the file's name
  nlohmann::ordered_json schema;
  std::vector<MaskBenchInstance> instances;
};

// Throws Error(kInvalidArgument) for a file that is not a MaskBench case.
MaskBenchCase load_maskbench_case(const std::filesystem::path &path);
MaskBenchCase parse_maskbench_case(std::string_view text, const std::string &name);

struct InstanceOutcome {
  bool accepted = false;        // every token in its mask and an accepting end
  std::size_t tokens = 0;       // tokens of the instance
  std::size_t stopped_at = 0;   // the first token outside the mask (== tokens: at the end)
  bool mask_disagrees = false;  // the mask and accept_token disagreed (an engine bug)
};

// Walks `ids` through `grammar`'s masks; the time of each mask fill (microseconds)
// is appended to `mask_us` when given.
InstanceOutcome walk_tokens(const std::shared_ptr<const CompiledGrammar> &grammar,
                            const std::vector<TokenId> &ids, std::vector<double> *mask_us);

}  // namespace keel::grammar
