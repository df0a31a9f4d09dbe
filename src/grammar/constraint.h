// The entry point of the module: a request's constraint (kind + text) compiled into a
// grammar bound to a vocabulary, cached by its text so that requests of one shape
// share one compiled grammar and its precomputed token tables.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "grammar/compiled_grammar.h"

namespace keel::grammar {

enum class ConstraintKind : std::uint8_t {
  kNone,        // unconstrained
  kJsonSchema,  // text: a JSON Schema
  kJsonObject,  // any JSON object (text unused)
  kRegex,       // text: a regular expression the whole output matches
  kChoice,      // text: a JSON array of strings, the output is one of them
  kGrammar,     // text: GBNF
  kTaggedJson,  // text: JSON Schema documents in literal text (grammar/tagged_json.h)
};

const char *constraint_kind_name(ConstraintKind kind);
// "json_schema", "json_object", "regex", "choice", "grammar", "tagged_json"; nullopt otherwise.
std::optional<ConstraintKind> parse_constraint_kind(std::string_view name);

struct Constraint {
  ConstraintKind kind = ConstraintKind::kNone;
  std::string text;
};

// The grammar of `c`; throws Error(kInvalidArgument) whose message starts with `where`
// (the request field, e.g. "response_format.json_schema.schema") and names the path.
Grammar compile_grammar(const Constraint &c, const std::string &where = {});

// Compiled grammars for one vocabulary, least recently used dropped past `capacity`.
//
// With `precompute`, a worker thread owned by the cache builds each new grammar's token
// tables in the background, so that decode steps rarely pay for a first use.
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocab> vocab, std::size_t capacity = 64,
               bool precompute = false);
  ~GrammarCache();
  GrammarCache(const GrammarCache &) = delete;
  GrammarCache &operator=(const GrammarCache &) = delete;

  // Compiles on a miss (errors as compile_grammar). Thread-safe; concurrent misses of
  // one text may both compile, and one result wins.
  std::shared_ptr<const CompiledGrammar> get(const Constraint &c, const std::string &where = {});
  std::size_t size() const;
  const std::shared_ptr<const TokenVocab> &vocab() const { return vocab_; }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  std::shared_ptr<const TokenVocab> vocab_;
  std::size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recent
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  // The background precomputation.
  void precompute_loop();
  std::condition_variable cv_;
  std::deque<std::weak_ptr<const CompiledGrammar>> pending_;
  std::atomic<bool> stop_{false};
  std::thread worker_;
};

}  // namespace keel::grammar
