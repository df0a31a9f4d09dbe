// Helpers for the model tests: open a fixture with the CPU runner, run prompts through
// prefill and decode with paged block tables, and read the reference JSON.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <numeric>
#include <vector>

#include "exec/cpu/activation.h"
#include "exec/cpu/cpu_model_runner.h"

namespace keel::test {

// A sequence's block table: blocks handed out in a scrambled order so that paging,
// not contiguity, is what the tests exercise.
struct PagedSeq {
  std::vector<TokenId> tokens;       // all tokens so far (prompt + fed)
  std::vector<std::int32_t> blocks;  // its block table
  std::int32_t computed = 0;         // tokens already in the KV cache
};

class BlockHandout {
 public:
  BlockHandout(std::int32_t num_blocks, std::uint32_t seed) : free_(num_blocks) {
    std::iota(free_.begin(), free_.end(), 0);
    std::uint32_t s = seed;
    for (std::size_t i = free_.size(); i > 1; --i) {  // deterministic shuffle
      s = s * 1664525u + 1013904223u;
      std::swap(free_[i - 1], free_[s % i]);
    }
  }
  void ensure(PagedSeq &seq, std::int64_t tokens, std::int32_t block_size) {
    while (static_cast<std::int64_t>(seq.blocks.size()) * block_size < tokens) {
      seq.blocks.push_back(free_.back());
      free_.pop_back();
    }
  }

 private:
  std::vector<std::int32_t> free_;
};

// One step: each entry computes `n` more tokens of a sequence (its tokens must already
// hold them). Returns the logits rows in order.
struct StepItem {
  PagedSeq *seq;
  std::int32_t n;
  SequenceSlice::Logits logits;
};

// With `greedy`, through forward_sample with greedy rows (the runner's own argmax).
inline ForwardOutput run_step(ModelRunner &runner, BlockHandout &blocks,
                              std::vector<StepItem> items, bool greedy = false) {
  ForwardBatch b;
  const std::int32_t bs = runner.kv().block_size();
  for (auto &it : items) {
    SequenceSlice s;
    s.token_offset = b.total_tokens();
    s.num_tokens = it.n;
    s.start_pos = it.seq->computed;
    blocks.ensure(*it.seq, s.start_pos + it.n, bs);
    s.block_offset = static_cast<std::int32_t>(b.block_table.size());
    s.num_blocks = static_cast<std::int32_t>(it.seq->blocks.size());
    s.logits = it.logits;
    b.block_table.insert(b.block_table.end(), it.seq->blocks.begin(), it.seq->blocks.end());
    b.tokens.insert(b.tokens.end(), it.seq->tokens.begin() + s.start_pos,
                    it.seq->tokens.begin() + s.start_pos + it.n);
    b.seqs.push_back(s);
  }
  ForwardOutput out;
  if (greedy) {
    static const SamplingParams kGreedy = [] {
      SamplingParams p;
      p.temperature = 0.0f;
      return p;
    }();
    std::vector<DeviceSampleRow> rows;
    for (const auto &it : items)
      if (it.logits == SequenceSlice::Logits::kLast) rows.push_back(DeviceSampleRow{&kGreedy});
    runner.forward_sample(b, rows, out);
  } else {
    runner.forward(b, out);
  }
  for (auto &it : items) it.seq->computed += it.n;
  return out;
}

inline std::vector<float> log_softmax_row(const ForwardOutput &o, std::size_t row) {
  std::vector<float> lp(o.vocab_size);
  cpu::log_softmax(o.logits.data() + row * o.vocab_size, lp.data(), o.vocab_size);
  return lp;
}

}  // namespace keel::test
