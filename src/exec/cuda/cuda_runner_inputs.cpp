// CudaModelRunner's input staging: a forward batch checked against the runner's limits,
// then its tokens, positions, KV slots, logits rows, attention tiles (the attention
// path, cuda_attention_plan.h) and block table written to one pinned i32 array and
// copied to the device in one go on the compute stream.
#include <algorithm>
#include <cstring>
#include <string>

#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/cuda_runner_detail.h"

namespace keel::cuda {

using runner_detail::bad_batch;

CudaModelRunner::StepShape CudaModelRunner::stage_inputs(const ForwardBatch &b, bool graph,
                                                         std::vector<std::int32_t> &row_seq,
                                                         std::vector<std::int32_t> &row_pos,
                                                         int &num_rows) {
  const std::int32_t T = b.total_tokens();
  const std::int32_t S = static_cast<std::int32_t>(b.seqs.size());
  const std::int32_t bs = kv_->block_size();
  if (T > max_tokens_)
    throw bad_batch(std::to_string(T) + " tokens exceed max_batch_tokens " +
                    std::to_string(max_tokens_));
  if (S > max_seqs_)
    throw bad_batch(std::to_string(S) + " sequences exceed max_seqs " + std::to_string(max_seqs_));
  if (static_cast<std::int64_t>(b.block_table.size()) > max_table_)
    throw bad_batch("block table too long");
  for (TokenId t : b.tokens)
    if (t < 0 || t >= V_)
      throw bad_batch("token id " + std::to_string(t) + " outside the vocabulary");
  for (std::int32_t blk : b.block_table)
    if (blk < 0 || blk >= kv_->num_blocks())
      throw bad_batch("block id " + std::to_string(blk) + " out of range");

  // A graph-replayed batch is padded to Tp tokens (token 0, position 0, slot -1 so
  // nothing is stored, a one-key tile, a row whose logits nobody reads), so every device
  // offset below depends on Tp alone.
  const std::int32_t Tp = graph ? graph_bucket(T) : T;

  // Stage: [tokens Tp][positions Tp][slots Tp][rows Rp][tiles 4 x n][block_table].
  if (inputs_pending_) inputs_copied_.wait(ctx_.wait_timeout(), "cuda runner: input staging");
  std::int32_t *h = host_in_.as<std::int32_t>();
  std::int32_t *tokens = h, *positions = h + Tp, *slots = h + 2 * Tp, *rows = h + 3 * Tp;
  std::fill(tokens, tokens + Tp, 0);
  std::fill(positions, positions + Tp, 0);
  std::fill(slots, slots + Tp, -1);  // tokens no sequence claims are computed but never stored
  std::copy(b.tokens.begin(), b.tokens.end(), tokens);
  row_seq.clear();
  row_pos.clear();
  AttentionPlan attn(attn_path_);
  for (std::int32_t s = 0; s < S; ++s) {
    const SequenceSlice &q = b.seqs[s];
    const std::int64_t end = std::int64_t(q.start_pos) + q.num_tokens;
    if (q.num_tokens < 0 || q.token_offset < 0 || q.start_pos < 0 ||
        std::int64_t(q.token_offset) + q.num_tokens > T)
      throw bad_batch("sequence " + std::to_string(s) + ": tokens out of range");
    if (end > max_model_len_)
      throw bad_batch("sequence " + std::to_string(s) + ": longer than max_model_len");
    if (q.num_blocks < 0 || q.block_offset < 0 ||
        std::int64_t(q.block_offset) + q.num_blocks >
            static_cast<std::int64_t>(b.block_table.size()) ||
        std::int64_t(q.num_blocks) * bs < end)
      throw bad_batch("sequence " + std::to_string(s) +
                      ": block table does not cover its positions");
    for (std::int32_t j = 0; j < q.num_tokens; ++j) {
      const std::int32_t t = q.token_offset + j, pos = q.start_pos + j;
      positions[t] = pos;
      slots[t] = b.block_table[q.block_offset + pos / bs] * bs + pos % bs;
    }
    attn.add_sequence(q.token_offset, q.num_tokens, q.start_pos, q.block_offset);
    // kLast, kAll, or a verify's kTail rows (its last accepted token, then each draft).
    if (q.logits == SequenceSlice::Logits::kTail &&
        (q.num_logits < 1 || q.num_logits > q.num_tokens))
      throw bad_batch("sequence " + std::to_string(s) + ": num_logits outside the slice");
    if (q.num_tokens > 0)
      for (std::int32_t j = q.first_logits_token(); j < q.num_tokens; ++j) {
        if (static_cast<std::int32_t>(row_seq.size()) >= max_rows_)
          throw bad_batch("more than max_logits_rows " + std::to_string(max_rows_) +
                          " logits rows requested");
        rows[row_seq.size()] = q.token_offset + j;
        row_seq.push_back(s);
        row_pos.push_back(q.start_pos + j);
      }
  }
  num_rows = static_cast<int>(row_seq.size());
  int Rp = num_rows;
  if (graph) {
    for (std::int32_t i = T; i < Tp; ++i) {
      rows[i] = i;
      attn.add_padding(i);
    }
    Rp = Tp;
  }
  const std::vector<AttnTile> tiles = attn.ordered();
  const std::size_t tiles_at = 3 * std::size_t(Tp) + Rp;
  std::memcpy(h + tiles_at, tiles.data(), tiles.size() * sizeof(AttnTile));
  const std::size_t table_at = tiles_at + 4 * tiles.size();
  std::copy(b.block_table.begin(), b.block_table.end(), h + table_at);
  std::size_t n_ints = table_at + b.block_table.size();
  // MLA prefills over the split path's rows: a single-query tile a row, q_start relative
  // to its chunk of mla_split_rows_ rows (launch_mla_attention_block).
  std::size_t mla_chunk_tiles_at = 0;
  if (mla_ && mla_prefill_chunks_ && !graph && mla_split_rows_ > 0 && Tp > mla_split_rows_) {
    mla_chunk_tiles_at = n_ints;
    auto *chunk = reinterpret_cast<AttnTile *>(h + n_ints);
    std::fill(chunk, chunk + Tp, AttnTile{0, 0, 0, 0});  // rows no sequence claims: no query
    for (const SequenceSlice &q : b.seqs)
      for (std::int32_t j = 0; j < q.num_tokens; ++j) {
        const std::int32_t t = q.token_offset + j;
        chunk[t] = AttnTile{t % mla_split_rows_, 1, q.start_pos + j, q.block_offset};
      }
    n_ints += 4 * std::size_t(Tp);
  }

  const StreamRef s = ctx_.compute();
  KEEL_CUDA_CHECK(cudaMemcpyAsync(dev_in_.data(), h, n_ints * sizeof(std::int32_t),
                                  cudaMemcpyHostToDevice, s.get("cuda runner: input staging")));
  inputs_copied_.record(s);
  inputs_pending_ = true;

  StepShape shape;
  shape.T = Tp;
  shape.R = Rp;
  shape.n_single = attn.num_single();
  shape.n_multi = attn.num_multi();
  shape.n_flash = attn.num_flash();
  shape.tiles_at = tiles_at;
  shape.table_at = table_at;
  shape.mla_chunk_tiles_at = mla_chunk_tiles_at;
  shape.splits_single = attn.splits_single(graph);
  shape.splits_multi = attn.splits_multi(graph);
  shape.splits_single_narrow = attn.splits_single(graph, attn_path_.narrow_window);
  shape.splits_multi_narrow = attn.splits_multi(graph, attn_path_.narrow_window);
  if (mla_ && Tp <= mla_split_rows_) {
    const std::int64_t topk = config_.mla->dsa() ? config_.mla->index_topk : 0;
    shape.splits_mla =
        attn.splits_latent(static_cast<int>((nh_ + kMlaHeadGroup - 1) / kMlaHeadGroup),
                           static_cast<std::int32_t>(topk), Tp, mla_split_rows_, graph);
  }
  return shape;
}

}  // namespace keel::cuda
