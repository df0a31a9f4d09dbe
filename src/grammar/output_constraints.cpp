#include "grammar/output_constraints.h"

#include <future>

#include "core/error.h"
#include "grammar/constrained_decoder.h"
#include "grammar/constraint.h"
#include "text/tokenizer.h"

namespace keel::grammar {

namespace {

class GrammarOutputConstraint final : public OutputConstraint {
 public:
  explicit GrammarOutputConstraint(std::shared_ptr<const CompiledGrammar> g) : dec_(std::move(g)) {}
  bool compute_mask(std::span<const TokenId> end_ids) override {
    return dec_.compute_mask(end_ids);
  }
  std::span<const std::uint32_t> mask_words() const override { return dec_.mask().words(); }
  bool accept(TokenId token) override {
    return dec_.accept(token) != ConstrainedDecoder::Status::kRejected;
  }

 private:
  ConstrainedDecoder dec_;
};

std::unique_ptr<OutputConstraint> make_constraint(GrammarCache &cache, const SamplingParams &p) {
  auto kind = parse_constraint_kind(p.constraint_kind);
  if (!kind)
    throw Error(ErrorCode::kInvalidArgument, "unknown constraint kind '" + p.constraint_kind + "'");
  return std::make_unique<GrammarOutputConstraint>(cache.get({*kind, p.constraint_text}));
}

}  // namespace

OutputConstraintFactory output_constraint_factory(std::shared_ptr<const TokenVocab> vocab) {
  auto cache = std::make_shared<GrammarCache>(std::move(vocab), 16, /*precompute=*/true);
  return [cache](const SamplingParams &p) { return make_constraint(*cache, p); };
}

OutputConstraintFactory output_constraint_factory(const std::filesystem::path &model) {
  auto cache = std::make_shared<std::shared_future<std::shared_ptr<GrammarCache>>>(
      std::async(std::launch::async, [model] {
        auto tok = Tokenizer::load(model);
        // A grammar's tables reach tens of MB at a 152k vocabulary: keep a few.
        return std::make_shared<GrammarCache>(TokenVocab::from_tokenizer(*tok), 16,
                                              /*precompute=*/true);
      }).share());
  return [cache](const SamplingParams &p) -> std::unique_ptr<OutputConstraint> {
    if (!parse_constraint_kind(p.constraint_kind))
      throw Error(ErrorCode::kInvalidArgument,
                  "unknown constraint kind '" + p.constraint_kind + "'");
    std::shared_ptr<GrammarCache> c;
    try {
      c = cache->get();
    } catch (const std::exception &e) {
      throw Error(ErrorCode::kUnavailable,
                  std::string("structured output: the tokenizer did not load: ") + e.what());
    }
    return make_constraint(*c, p);
  };
}

}  // namespace keel::grammar
