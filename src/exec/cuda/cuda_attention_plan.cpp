#include "exec/cuda/cuda_attention_plan.h"

#include <algorithm>

namespace keel::cuda {

void AttentionPlan::add_sequence(std::int32_t token_offset, std::int32_t num_tokens,
                                 std::int32_t start_pos, std::int32_t block_offset) {
  const std::int32_t tq = c_.flash ? c_.flash_tile_q : c_.tile_q;
  for (std::int32_t j = 0; j < num_tokens; j += tq) {
    const AttnTile tile{token_offset + j, std::min(tq, num_tokens - j), start_pos + j,
                        block_offset};
    max_kv_all_ = std::max<std::int32_t>(max_kv_all_, tile.pos0 + tile.num_q);
    if (tile.num_q > 1 && c_.flash) {
      flash_.push_back(tile);
      continue;
    }
    for (std::int32_t k = 0; k < tile.num_q; k += c_.tile_q) {  // general-kernel sized
      const AttnTile sub{tile.q_start + k, std::min(c_.tile_q, tile.num_q - k), tile.pos0 + k,
                         tile.block_offset};
      const bool single = sub.num_q == 1 && c_.decode_kernel;
      auto &kv_max = single ? max_kv_single_ : max_kv_multi_;
      kv_max = std::max<std::int32_t>(kv_max, sub.pos0 + sub.num_q);
      (single ? single_ : multi_).push_back(sub);
    }
  }
}

void AttentionPlan::add_padding(std::int32_t row) {
  (c_.decode_kernel ? single_ : multi_).push_back(AttnTile{row, 1, 0, 0});
}

std::vector<AttnTile> AttentionPlan::ordered() const {
  std::vector<AttnTile> all;
  all.reserve(single_.size() + multi_.size() + flash_.size());
  all.insert(all.end(), single_.begin(), single_.end());
  all.insert(all.end(), multi_.begin(), multi_.end());
  all.insert(all.end(), flash_.begin(), flash_.end());
  return all;
}

std::int32_t AttentionPlan::visible(std::int32_t max_kv, std::int32_t q, std::int64_t window) {
  return static_cast<std::int32_t>(window > 0 ? std::min<std::int64_t>(max_kv, window + q - 1)
                                              : max_kv);
}

// Split-K when the grid would leave most SMs idle (decode with few sequences).
int AttentionPlan::splits(int n_tiles, std::int32_t max_kv, bool graph) const {
  const std::int64_t work = std::int64_t(n_tiles) * c_.num_kv_heads;
  const std::int64_t fill = 2 * std::int64_t(c_.num_sms);
  if (work <= 0 || work >= fill) return 1;
  std::int64_t sp = std::min<std::int64_t>((fill + work - 1) / work, (max_kv + 63) / 64);
  if (graph) {
    // Rounding down keeps at least half the blocks that fill the GPU twice over (rounding
    // up measured slower: 8B batch 1 at ~576 keys 16 splits 202 tok/s, 8 210).
    std::int64_t p2 = 1;
    while (p2 * 2 <= sp) p2 *= 2;
    sp = p2;
    while (sp > 1 && sp * work > c_.partial_entries) sp /= 2;
  }
  if (c_.split_cap > 0) sp = std::min<std::int64_t>(sp, c_.split_cap);
  return static_cast<int>(
      std::max<std::int64_t>(1, std::min<std::int64_t>(sp, c_.partial_entries / work)));
}

// As splits(), for the latent attention: the work is tiles x head groups, and a split of
// fewer than 128 keys would spend more on its partial (kv_lora + 2 floats a head) than a
// fifth of its key reads.
int AttentionPlan::splits_latent(int head_groups, std::int32_t key_cap, std::int32_t rows,
                                 std::int32_t units, bool graph) const {
  const std::int64_t work =
      std::int64_t(single_.size() + multi_.size() + flash_.size()) * std::max(1, head_groups);
  const std::int64_t fill = 2 * std::int64_t(c_.num_sms);
  const std::int32_t keys = key_cap > 0 ? std::min(max_kv_all_, key_cap) : max_kv_all_;
  if (work <= 0 || work >= fill || rows <= 0) return 1;
  std::int64_t sp = std::min<std::int64_t>((fill + work - 1) / work, (keys + 127) / 128);
  sp = std::min<std::int64_t>({sp, kMaxLatentSplits, std::max(1, units / rows)});
  if (c_.split_cap > 0) sp = std::min<std::int64_t>(sp, c_.split_cap);
  if (graph) {
    std::int64_t p2 = 1;
    while (p2 * 2 <= sp) p2 *= 2;
    sp = p2;
  }
  return static_cast<int>(std::max<std::int64_t>(1, sp));
}

}  // namespace keel::cuda
