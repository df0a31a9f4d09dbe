// The input of one forward pass: a ragged batch of sequences, each a prefill chunk or
// one decode token, attending over the paged KV cache. Plain data, built by the engine
// from a step plan, consumed by any backend.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ids.h"

namespace keel {

struct SequenceSlice {
  std::int32_t token_offset = 0;  // first token of this sequence in ForwardBatch::tokens
  std::int32_t num_tokens = 0;    // tokens computed this step (a prefill chunk, or 1 to decode)
  std::int32_t start_pos = 0;     // position of the first of them == tokens already in the KV cache
  std::int32_t block_offset = 0;  // first entry of this sequence in ForwardBatch::block_table
  std::int32_t num_blocks = 0;    // blocks covering positions [0, start_pos + num_tokens)
  // Which rows of logits to return: none (a non-final prefill chunk), the last token's,
  // every token's (prompt logprobs / echo), or the last `num_logits` tokens' in order
  // (a speculative verify: the last accepted token, then k drafts: num_logits = 1 + k;
  // kLast is kTail with 1).
  enum class Logits : std::uint8_t { kNone, kLast, kAll, kTail } logits = Logits::kLast;
  std::int32_t num_logits = 1;  // kTail only: rows from the last num_logits tokens
  // Index of the first token whose logits row this slice returns (num_tokens: none).
  std::int32_t first_logits_token() const {
    switch (logits) {
      case Logits::kNone:
        return num_tokens;
      case Logits::kLast:
        return num_tokens - 1;
      case Logits::kAll:
        return 0;
      case Logits::kTail:
        return num_tokens - num_logits;
    }
    return num_tokens;
  }
};

struct ForwardBatch {
  std::vector<TokenId> tokens;      // [total_tokens]
  std::vector<SequenceSlice> seqs;  // [num_seqs]
  std::vector<std::int32_t>
      block_table;  // concatenated block ids; position p of a sequence
                    // lives in block table[p / block_size], slot p % block_size
  // Also return every token's final hidden state, before the final norm
  // (ForwardOutput::hidden): what an MTP drafter consumes.
  bool want_hidden = false;
  // With want_hidden: when not empty, each token's row is instead the concatenation, in
  // this order, of the outputs of these decoder layers (the residual stream after layer l,
  // i.e. the input of layer l + 1; ids in [0, num_layers), repeats allowed): what an EAGLE-3
  // head consumes (its aux layers). Runners that cannot give them throw Error(kUnsupported).
  std::vector<std::int32_t> hidden_layers;
  std::int32_t total_tokens() const { return static_cast<std::int32_t>(tokens.size()); }
};

struct ForwardOutput {
  std::int32_t vocab_size = 0;
  std::vector<float> logits;          // [rows, vocab_size], float32, rows in batch order
  std::vector<std::int32_t> row_seq;  // [rows] index into ForwardBatch::seqs
  std::vector<std::int32_t>
      row_pos;  // [rows] position of the token whose next-token logits these are
  // ModelRunner::forward_sample only (logits then stay empty): [rows] the token sampled
  // from each row and its log-probability under the raw logits.
  std::vector<TokenId> sampled;
  std::vector<float> sampled_logprobs;
  // ForwardBatch::want_hidden only: [total_tokens, hidden_size * max(1, hidden_layers)],
  // batch token order.
  std::vector<float> hidden;
};

}  // namespace keel
