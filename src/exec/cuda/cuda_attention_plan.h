// The attention-path choice of one forward pass: which kernel runs each query tile
// (the decode kernel for single queries, the tensor-core flash kernel for prefill
// tiles, the general kernel for the rest) and how far each launch splits over the keys.
// Host logic only; the runner stages the tiles it returns and launches the kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

struct AttentionPathConfig {
  bool decode_kernel = false;        // decode_attention_supported for the model's heads
  bool flash = false;                // flash_attention_supported and enabled
  std::int32_t tile_q = 1;           // queries per general-kernel tile
  std::int32_t flash_tile_q = 1;     // queries per flash tile
  int num_sms = 1;                   // the device's SMs: the grid split-K aims to fill
  std::int32_t partial_entries = 0;  // split-K scratch entries (tiles x kv heads x splits)
  int split_cap = 0;                 // CudaKernelChoices::attn_split_cap; 0: none
  std::int64_t num_kv_heads = 1;
  std::int64_t window = 0;  // sliding window; 0: none
  // Where layers attend within different windows (gpt-oss alternates a sliding window
  // with full attention), the smallest: the layers with it get their own split-K factor
  // (splits_*(graph, narrow_window)). 0: every layer has `window`.
  std::int64_t narrow_window = 0;
};

class AttentionPlan {
 public:
  explicit AttentionPlan(const AttentionPathConfig &config) : c_(config) {}

  // The tiles of one sequence's num_tokens queries from start_pos (rows token_offset..).
  void add_sequence(std::int32_t token_offset, std::int32_t num_tokens, std::int32_t start_pos,
                    std::int32_t block_offset);
  // A graph's padding row: one query at position 0 that sees one key.
  void add_padding(std::int32_t row);

  // Tiles in launch order: decode, then general, then flash.
  std::vector<AttnTile> ordered() const;
  int num_single() const { return static_cast<int>(single_.size()); }
  int num_multi() const { return static_cast<int>(multi_.size()); }
  int num_flash() const { return static_cast<int>(flash_.size()); }
  // Split-K factors of the decode and general launches. In a graph-replayed step the
  // factor is a power of two rounded down, so few graphs cover all context lengths.
  int splits_single(bool graph) const { return splits_single(graph, c_.window); }
  int splits_multi(bool graph) const { return splits_multi(graph, c_.window); }
  // The same for layers that attend within `window` (0: none).
  int splits_single(bool graph, std::int64_t window) const {
    return splits(num_single(), visible(max_kv_single_, 1, window), graph);
  }
  int splits_multi(bool graph, std::int64_t window) const {
    return splits(num_multi(), visible(max_kv_multi_, c_.tile_q, window), graph);
  }
  // The split factor of MLA's split path (k_mla_attention.h) over every tile: each tile
  // runs `head_groups` CTAs a split; a query reads at most `key_cap` keys (DSA's
  // index_topk; 0: no cap); rows x splits partials must fit `units`. Power of two for
  // graphs, at most kMaxLatentSplits, at least 128 keys a split.
  static constexpr int kMaxLatentSplits = 256;
  int splits_latent(int head_groups, std::int32_t key_cap, std::int32_t rows, std::int32_t units,
                    bool graph) const;

 private:
  int splits(int n_tiles, std::int32_t max_kv, bool graph) const;
  // With a sliding window a tile of q queries sees at most window + q - 1 keys.
  static std::int32_t visible(std::int32_t max_kv, std::int32_t q, std::int64_t window);

  AttentionPathConfig c_;
  std::vector<AttnTile> single_, multi_, flash_;
  std::int32_t max_kv_single_ = 0, max_kv_multi_ = 0;
  std::int32_t max_kv_all_ = 1;  // keys of the longest query of any tile
};

}  // namespace keel::cuda
