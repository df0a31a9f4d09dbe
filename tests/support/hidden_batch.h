// A forward batch of one sequence from position 0 (blocks 0, 1, ... of 16 positions) that
// asks the runner for hidden rows: the final hidden state, or the outputs of `layers`
// (ForwardBatch::want_hidden / hidden_layers), as a drafting head is fed.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "exec/forward_batch.h"

namespace keel::test {

inline ForwardBatch hidden_batch(const std::vector<TokenId> &tokens,
                                 std::vector<std::int32_t> layers = {},
                                 SequenceSlice::Logits logits = SequenceSlice::Logits::kLast) {
  ForwardBatch b;
  b.tokens = tokens;
  b.want_hidden = true;
  b.hidden_layers = std::move(layers);
  SequenceSlice s;
  s.num_tokens = static_cast<std::int32_t>(tokens.size());
  s.num_blocks = (s.num_tokens + 15) / 16;
  s.logits = logits;
  b.seqs.push_back(s);
  for (int i = 0; i < s.num_blocks; ++i) b.block_table.push_back(i);
  return b;
}

}  // namespace keel::test
