// What a benchmark sends: sessions of one or more turns, generated from a seed so that
// a run can be repeated. Lengths are in tokens: exact for token-id prompts, about one
// token a word for text prompts (the server's usage gives the real counts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel::loadgen {

enum class WorkloadKind {
  kRandom,        // input lengths drawn around --input-len, unrelated prompts
  kFixed,         // every prompt exactly --input-len
  kSharedPrefix,  // few long prefixes, each shared by many prompts: the prefix cache's case
  kAgent,         // multi-turn chat sessions whose prompt grows each turn
  kEdit,          // copy-heavy code edits: a file, then its edited copy begun (speculative
                  // decoding's n-gram lookup case)
};

// Parses "random", "fixed", "shared-prefix", "agent", "edit"; throws keel::Error otherwise.
WorkloadKind parse_workload_kind(const std::string &name);
const char *workload_kind_name(WorkloadKind kind);

struct WorkloadOptions {
  WorkloadKind kind = WorkloadKind::kRandom;
  int num_prompts = 100;
  int input_len = 256;
  int output_len = 64;
  double range_ratio = 0.5;   // random: lengths uniform in [len*(1-r), len*(1+r)]
  int num_prefixes = 4;       // shared-prefix: distinct prefixes
  int prefix_len = 0;         // shared-prefix / agent system prompt; 0: derived from input_len
  int turns = 4;              // agent: turns per session
  bool token_prompts = true;  // token-id prompts (/v1/completions) or text
  int min_token_id = 100;     // token-id prompts draw ids from [min, max)
  int max_token_id = 4096;
  std::uint64_t seed = 0;
};

struct Turn {
  std::vector<int> prompt_ids;  // token-id prompt (completions, token_prompts)
  std::string prompt_text;      // text prompt (completions) or the user message (agent)
  int input_len = 0;            // the length asked for, in tokens
  int max_tokens = 0;
};

struct Session {
  bool chat = false;          // agent: /v1/chat/completions with a growing history
  std::string system_prompt;  // agent: shared by every session, as an agent's instructions are
  int prefix_group = -1;      // shared-prefix: which prefix this prompt starts with
  std::vector<Turn> turns;
};

struct Workload {
  WorkloadOptions options;
  std::vector<Session> sessions;
  int total_turns() const;
};

// Throws keel::Error (kInvalidArgument) on options that cannot make a workload.
Workload make_workload(const WorkloadOptions &options);

}  // namespace keel::loadgen
