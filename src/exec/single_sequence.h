// Drives a ModelRunner for one sequence at a time (keel run, keel perplexity, the CPU
// benchmark): owns a block table over the runner's whole KV store, feeds prompts in
// chunks and decodes token by token. The engine, which batches many sequences, uses
// its own scheduler instead.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "exec/model_runner.h"

namespace keel {

class SingleSequence {
 public:
  // chunk: the most tokens one forward pass computes during prefill.
  explicit SingleSequence(ModelRunner &runner, std::int32_t chunk = 512);

  // Tokens the KV store can hold for this sequence.
  std::int64_t capacity() const;
  std::int64_t length() const { return length_; }
  void reset() { length_ = 0; }
  // Forgets the positions from `length` on (drafts the model rejected); their KV slots
  // are written again by the next append.
  void truncate(std::int64_t length) {
    length_ = std::min(length_, std::max<std::int64_t>(length, 0));
  }

  // Appends `tokens`. With all_logits, returns [tokens.size(), vocab] logits (row i
  // predicts the token after tokens[i]); otherwise only the last row [1, vocab].
  // Throws Error(kResourceExhausted) when the KV store would overflow.
  std::vector<float> append(std::span<const TokenId> tokens, bool all_logits);

  // From now on every append also asks for each token's hidden rows
  // (ForwardBatch::want_hidden, `layers` as ForwardBatch::hidden_layers), for a drafter
  // that reads them (keel run --speculative eagle3:PATH); hidden() then holds the last
  // append's, [tokens, row width].
  void keep_hidden(std::vector<std::int32_t> layers) {
    want_hidden_ = true;
    hidden_layers_ = std::move(layers);
  }
  const std::vector<float> &hidden() const { return hidden_; }

  // Like append(all_logits = true) but hands each chunk's rows to `sink(first_index,
  // rows, n)` instead of collecting them (perplexity over long texts).
  template <class Sink>
  void append_streaming(std::span<const TokenId> tokens, Sink &&sink);

 private:
  ForwardOutput step(std::span<const TokenId> tokens, SequenceSlice::Logits logits);

  ModelRunner &runner_;
  std::int32_t chunk_;
  std::int64_t length_ = 0;
  std::vector<std::int32_t> table_;
  bool want_hidden_ = false;
  std::vector<std::int32_t> hidden_layers_;
  std::vector<float> hidden_;
};

template <class Sink>
void SingleSequence::append_streaming(std::span<const TokenId> tokens, Sink &&sink) {
  for (std::size_t i = 0; i < tokens.size(); i += static_cast<std::size_t>(chunk_)) {
    const auto n = std::min<std::size_t>(chunk_, tokens.size() - i);
    ForwardOutput o = step(tokens.subspan(i, n), SequenceSlice::Logits::kAll);
    sink(i, o.logits.data(), n);
  }
}

}  // namespace keel
