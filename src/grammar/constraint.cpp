#include "grammar/constraint.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex_compiler.h"
#include "grammar/tagged_json.h"

namespace keel::grammar {

const char *constraint_kind_name(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kNone:
      return "none";
    case ConstraintKind::kJsonSchema:
      return "json_schema";
    case ConstraintKind::kJsonObject:
      return "json_object";
    case ConstraintKind::kRegex:
      return "regex";
    case ConstraintKind::kChoice:
      return "choice";
    case ConstraintKind::kGrammar:
      return "grammar";
    case ConstraintKind::kTaggedJson:
      return "tagged_json";
  }
  return "?";
}

std::optional<ConstraintKind> parse_constraint_kind(std::string_view name) {
  for (auto k : {ConstraintKind::kJsonSchema, ConstraintKind::kJsonObject, ConstraintKind::kRegex,
                 ConstraintKind::kChoice, ConstraintKind::kGrammar, ConstraintKind::kTaggedJson})
    if (name == constraint_kind_name(k)) return k;
  return std::nullopt;
}

namespace {

Grammar choice_grammar(std::string_view text, const std::string &where) {
  const std::string at = where.empty() ? "choice" : where;
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error &) {
    throw Error(ErrorCode::kInvalidArgument, at + ": must be a JSON array of strings");
  }
  if (!list.is_array() || list.empty())
    throw Error(ErrorCode::kInvalidArgument, at + ": must be a non-empty array of strings");
  std::vector<std::string> options;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string())
      throw Error(ErrorCode::kInvalidArgument, at + "." + std::to_string(i) + ": must be a string");
    options.push_back(list[i].get<std::string>());
  }
  GrammarBuilder b;
  auto root = b.add_rule("root");
  b.set_body(root, b.literals(options));
  return b.build(root);
}

}  // namespace

Grammar compile_grammar(const Constraint &c, const std::string &where) {
  auto prefixed = [&](const Error &e) {
    std::string msg = e.what();
    if (!where.empty() && msg.rfind(where, 0) != 0) msg = where + ": " + msg;
    return Error(e.code(), msg);
  };
  switch (c.kind) {
    case ConstraintKind::kJsonSchema: {
      JsonSchemaOptions opts;
      opts.where = where;
      return json_schema_grammar(std::string_view(c.text), opts);
    }
    case ConstraintKind::kJsonObject: {
      JsonSchemaOptions opts;
      opts.where = where;
      return json_schema_grammar(nlohmann::ordered_json{{"type", "object"}}, opts);
    }
    case ConstraintKind::kRegex:
      try {
        return regex_grammar(c.text, where.empty() ? "regex" : where);
      } catch (const Error &e) {
        throw prefixed(e);
      }
    case ConstraintKind::kChoice:
      return choice_grammar(c.text, where);
    case ConstraintKind::kGrammar:
      try {
        return gbnf_grammar(c.text);
      } catch (const Error &e) {
        throw prefixed(e);
      }
    case ConstraintKind::kTaggedJson:
      return tagged_json_grammar(parse_tagged_json(c.text, where), where);
    case ConstraintKind::kNone:
      break;
  }
  throw Error(ErrorCode::kInvalidArgument,
              (where.empty() ? "constraint" : where) + ": no constraint");
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocab> vocab, std::size_t capacity,
                           bool precompute)
    : vocab_(std::move(vocab)), capacity_(std::max<std::size_t>(1, capacity)) {
  if (precompute && vocab_) worker_ = std::thread([this] { precompute_loop(); });
}

GrammarCache::~GrammarCache() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void GrammarCache::precompute_loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_.load() || !pending_.empty(); });
    if (stop_) return;
    auto g = pending_.front().lock();
    pending_.pop_front();
    if (!g) continue;  // dropped from the cache and finished with
    lock.unlock();
    g->precompute_all(&stop_);
    lock.lock();
  }
}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const Constraint &c,
                                                         const std::string &where) {
  std::string key = std::string(constraint_kind_name(c.kind)) + '\n' + c.text;
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto compiled = std::make_shared<const CompiledGrammar>(compile_grammar(c, where), vocab_);
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  if (worker_.joinable()) {
    pending_.push_back(compiled);
    cv_.notify_one();
  }
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

std::size_t GrammarCache::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

}  // namespace keel::grammar
