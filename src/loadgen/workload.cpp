#include "loadgen/workload.h"

#include <algorithm>
#include <array>
#include <random>

#include "core/error.h"

namespace keel::loadgen {

namespace {

// Common short English words: with a leading space most are one token in BPE and
// SentencePiece vocabularies, so N words come to about N tokens.
constexpr std::array<const char *, 64> kWords = {
    "the",   "of",    "and",  "to",   "in",   "is",    "that",  "for",   "it",    "as",    "was",
    "with",  "be",    "by",   "on",   "not",  "he",    "this",  "are",   "or",    "his",   "from",
    "at",    "which", "but",  "have", "an",   "had",   "they",  "you",   "were",  "their", "one",
    "all",   "we",    "can",  "her",  "has",  "there", "been",  "if",    "more",  "when",  "will",
    "would", "who",   "so",   "no",   "code", "file",  "line",  "test",  "value", "list",  "name",
    "time",  "data",  "call", "type", "run",  "error", "build", "model", "state"};

class Generator {
 public:
  explicit Generator(const WorkloadOptions &o) : o_(o), rng_(o.seed) {}

  std::vector<int> ids(int n) {
    std::uniform_int_distribution<int> d(o_.min_token_id, o_.max_token_id - 1);
    std::vector<int> out(static_cast<std::size_t>(std::max(n, 0)));
    for (int &id : out) id = d(rng_);
    return out;
  }

  std::string words(int n) {
    std::uniform_int_distribution<std::size_t> d(0, kWords.size() - 1);
    std::string out;
    for (int i = 0; i < n; ++i) {
      if (i) out += ' ';
      out += kWords[d(rng_)];
    }
    return out;
  }

  int random_len(int len) {
    const int lo = std::max(1, static_cast<int>(len * (1.0 - o_.range_ratio)));
    const int hi = std::max(lo, static_cast<int>(len * (1.0 + o_.range_ratio)));
    return std::uniform_int_distribution<int>(lo, hi)(rng_);
  }

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  // A code file of about n tokens (about 12 a line) where `name` recurs.
  std::vector<std::string> code_lines(int n, const std::string &name) {
    std::vector<std::string> lines;
    for (int i = 0; i * 12 < n; ++i) {
      std::uniform_int_distribution<std::size_t> d(0, kWords.size() - 1);
      const std::string a = kWords[d(rng_)], b = kWords[d(rng_)];
      lines.push_back("  " + a + "_" + std::to_string(i) + " = " + name + "." + b + "(" + a + ", " +
                      std::to_string(i * 7 % 100) + ");");
    }
    return lines;
  }

  // A completion turn of n tokens that starts with an optional shared prefix.
  Turn completion(int n, const std::vector<int> *prefix_ids, const std::string *prefix_text,
                  int prefix_len) {
    Turn t;
    t.input_len = n;
    t.max_tokens = o_.output_len;
    const int rest = std::max(1, n - prefix_len);
    if (o_.token_prompts) {
      if (prefix_ids) t.prompt_ids = *prefix_ids;
      auto tail = ids(rest);
      t.prompt_ids.insert(t.prompt_ids.end(), tail.begin(), tail.end());
      t.input_len = static_cast<int>(t.prompt_ids.size());
    } else {
      t.prompt_text = prefix_text ? *prefix_text + " " + words(rest) : words(rest);
      t.input_len = prefix_len + rest;
    }
    return t;
  }

 private:
  const WorkloadOptions &o_;
  std::mt19937_64 rng_;
};

void check(const WorkloadOptions &o) {
  auto bad = [](const std::string &m) { throw Error(ErrorCode::kInvalidArgument, m); };
  if (o.num_prompts < 1) bad("--num-prompts must be at least 1");
  if (o.input_len < 1) bad("--input-len must be at least 1");
  if (o.output_len < 1) bad("--output-len must be at least 1");
  if (o.range_ratio < 0 || o.range_ratio >= 1) bad("--range-ratio must be in [0, 1)");
  if (o.num_prefixes < 1) bad("--num-prefixes must be at least 1");
  if (o.prefix_len < 0) bad("--prefix-len must not be negative");
  if (o.turns < 1) bad("--turns must be at least 1");
  if (o.min_token_id < 0 || o.max_token_id <= o.min_token_id) bad("token ids: need 0 <= min < max");
}

}  // namespace

WorkloadKind parse_workload_kind(const std::string &name) {
  if (name == "random") return WorkloadKind::kRandom;
  if (name == "fixed") return WorkloadKind::kFixed;
  if (name == "shared-prefix") return WorkloadKind::kSharedPrefix;
  if (name == "agent") return WorkloadKind::kAgent;
  if (name == "edit") return WorkloadKind::kEdit;
  throw Error(ErrorCode::kInvalidArgument, "--workload: '" + name +
                                               "' is not one of random, fixed, shared-prefix, "
                                               "agent, edit");
}

const char *workload_kind_name(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kRandom:
      return "random";
    case WorkloadKind::kFixed:
      return "fixed";
    case WorkloadKind::kSharedPrefix:
      return "shared-prefix";
    case WorkloadKind::kAgent:
      return "agent";
    case WorkloadKind::kEdit:
      return "edit";
  }
  return "?";
}

int Workload::total_turns() const {
  int n = 0;
  for (const auto &s : sessions) n += static_cast<int>(s.turns.size());
  return n;
}

Workload make_workload(const WorkloadOptions &o) {
  check(o);
  Workload w{o, {}};
  Generator g(w.options);
  switch (o.kind) {
    case WorkloadKind::kRandom:
    case WorkloadKind::kFixed:
      for (int i = 0; i < o.num_prompts; ++i) {
        const int n = o.kind == WorkloadKind::kFixed ? o.input_len : g.random_len(o.input_len);
        w.sessions.push_back(Session{false, "", -1, {g.completion(n, nullptr, nullptr, 0)}});
      }
      break;
    case WorkloadKind::kSharedPrefix: {
      // The prefix is most of the prompt; each prompt adds a short unique tail.
      const int plen = std::min(o.prefix_len > 0 ? o.prefix_len : o.input_len * 3 / 4,
                                std::max(o.input_len - 1, 0));
      std::vector<std::vector<int>> pids;
      std::vector<std::string> ptext;
      for (int p = 0; p < o.num_prefixes; ++p) {
        if (o.token_prompts)
          pids.push_back(g.ids(plen));
        else
          ptext.push_back(g.words(plen));
      }
      for (int i = 0; i < o.num_prompts; ++i) {
        const int p = g.pick(o.num_prefixes);
        Session s{false, "", p, {}};
        s.turns.push_back(o.token_prompts ? g.completion(o.input_len, &pids[p], nullptr, plen)
                                          : g.completion(o.input_len, nullptr, &ptext[p], plen));
        w.sessions.push_back(std::move(s));
      }
      break;
    }
    case WorkloadKind::kAgent: {
      // One long system prompt for all sessions (an agent's instructions and tools), then
      // turns of input_len words each; the runner adds each reply to the history.
      const std::string system =
          "You are a coding agent. " + g.words(o.prefix_len > 0 ? o.prefix_len : o.input_len);
      for (int left = o.num_prompts; left > 0; left -= o.turns) {
        Session s{true, system, 0, {}};
        for (int t = 0; t < std::min(left, o.turns); ++t) {
          Turn turn;
          turn.prompt_text = g.words(o.input_len);
          turn.input_len = o.input_len;
          turn.max_tokens = o.output_len;
          s.turns.push_back(std::move(turn));
        }
        w.sessions.push_back(std::move(s));
      }
      break;
    }
    case WorkloadKind::kEdit:
      // "Here is a file; here it is again with one name changed": the answer copies the
      // file, which prompt lookup drafts. Token-id prompts repeat the ids instead.
      for (int i = 0; i < o.num_prompts; ++i) {
        Turn t;
        t.max_tokens = o.output_len;
        if (o.token_prompts) {
          const auto file = g.ids(std::max(1, o.input_len - 4));
          t.prompt_ids = file;
          t.prompt_ids.insert(t.prompt_ids.end(), file.begin(),
                              file.begin() + std::min<std::size_t>(4, file.size()));
          t.input_len = static_cast<int>(t.prompt_ids.size());
        } else {
          const auto lines = g.code_lines(o.input_len / 2, "state");
          std::string file;
          for (const auto &l : lines) file += l + "\n";
          t.prompt_text = "// model.c\nvoid update(void) {\n" + file +
                          "}\n// model.c, with state renamed to model_state:\nvoid update(void) "
                          "{\n";
          t.input_len = o.input_len;
        }
        w.sessions.push_back(Session{false, "", -1, {std::move(t)}});
      }
      break;
  }
  return w;
}

}  // namespace keel::loadgen
