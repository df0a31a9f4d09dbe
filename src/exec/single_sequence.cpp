#include "exec/single_sequence.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace keel {

SingleSequence::SingleSequence(ModelRunner &runner, std::int32_t chunk)
    : runner_(runner), chunk_(std::max(chunk, 1)) {
  table_.resize(static_cast<std::size_t>(runner.kv().num_blocks()));
  for (std::size_t i = 0; i < table_.size(); ++i) table_[i] = static_cast<std::int32_t>(i);
}

std::int64_t SingleSequence::capacity() const {
  return static_cast<std::int64_t>(table_.size()) * runner_.kv().block_size();
}

ForwardOutput SingleSequence::step(std::span<const TokenId> tokens, SequenceSlice::Logits logits) {
  const std::int64_t end = length_ + static_cast<std::int64_t>(tokens.size());
  if (end > capacity())
    throw Error(
        ErrorCode::kResourceExhausted,
        "kv cache: " + std::to_string(end) + " tokens exceed its " + std::to_string(capacity()));
  const std::int32_t bs = runner_.kv().block_size();
  ForwardBatch b;
  b.tokens.assign(tokens.begin(), tokens.end());
  SequenceSlice s;
  s.token_offset = 0;
  s.num_tokens = static_cast<std::int32_t>(tokens.size());
  s.start_pos = static_cast<std::int32_t>(length_);
  s.block_offset = 0;
  s.num_blocks = static_cast<std::int32_t>((end + bs - 1) / bs);
  s.logits = logits;
  b.seqs.push_back(s);
  b.block_table.assign(table_.begin(), table_.begin() + s.num_blocks);
  b.want_hidden = want_hidden_;
  b.hidden_layers = hidden_layers_;
  ForwardOutput out;
  runner_.forward(b, out);
  length_ = end;
  return out;
}

std::vector<float> SingleSequence::append(std::span<const TokenId> tokens, bool all_logits) {
  std::vector<float> rows;
  hidden_.clear();
  if (tokens.empty()) return rows;
  for (std::size_t i = 0; i < tokens.size(); i += static_cast<std::size_t>(chunk_)) {
    const auto n = std::min<std::size_t>(chunk_, tokens.size() - i);
    const bool last = i + n == tokens.size();
    const auto mode = all_logits
                          ? SequenceSlice::Logits::kAll
                          : (last ? SequenceSlice::Logits::kLast : SequenceSlice::Logits::kNone);
    ForwardOutput o = step(tokens.subspan(i, n), mode);
    rows.insert(rows.end(), o.logits.begin(), o.logits.end());
    hidden_.insert(hidden_.end(), o.hidden.begin(), o.hidden.end());
  }
  return rows;
}

}  // namespace keel
