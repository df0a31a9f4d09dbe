// Prompt lookup (n-gram) drafting: the sequence's last n tokens are looked up earlier in
// the prompt and output (n from ngram_max down to ngram_min; the latest occurrence
// wins), and the tokens that followed that occurrence are the draft. No model, no
// state: what coding agents editing files gain most from (the output copies the input).
#pragma once

#include "engine/speculative.h"

namespace keel {

class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(std::int32_t ngram_max, std::int32_t ngram_min);
  const char *name() const override { return "ngram"; }
  void propose(RequestId id, std::span<const TokenId> tokens, std::int32_t max_tokens,
               std::vector<TokenId> &out) override;

 private:
  std::int32_t max_, min_;
};

}  // namespace keel
