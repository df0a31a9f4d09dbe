// Launchers of keel's own CUDA kernels, one family per .cu file. Every launcher takes
// a StreamRef issued by the engine's CudaContext (never a raw or default stream), checks
// that it runs on the context's owner thread (stream_ref.h) and checks the launch. Pointers are
// device pointers unless named host_*. Shapes are in comments.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/stream_ref.h"

namespace keel::cuda {

using bf16 = __nv_bfloat16;

// ---- k_embedding.cu ----
// out[t, :] = f32(table[tokens[t], :]); tokens outside [0, vocab) give a zero row
// (the runner rejects them before launch; the kernel must still not read out of bounds).
// tokens [T] i32, table [vocab, H] bf16, out [T, H] f32.
void launch_embedding(StreamRef s, const std::int32_t *tokens, int T, const bf16 *table,
                      std::int64_t vocab, int H, float *out);
// out[i, :] = in[rows[i], :]; in [*, H] bf16, rows [R] i32, out [R, H] bf16.
void launch_gather_rows(StreamRef s, const bf16 *in, const std::int32_t *rows, int R, int H,
                        bf16 *out);

// ---- k_rmsnorm.cu ----
// Fused residual add + RMSNorm over rows of H: when x is given, residual += x first;
// out = bf16(residual * rsqrt(mean(residual^2) + eps) * weight).
// x [rows, H] bf16 (nullable), residual [rows, H] f32 (in/out), weight [H] bf16, out [rows, H]
// bf16.
void launch_add_rmsnorm(StreamRef s, const bf16 *x, float *residual, const bf16 *weight, bf16 *out,
                        int rows, int H, float eps);
// out = in * rsqrt(mean(in^2) + eps) * weight in f32 (a norm whose output another norm
// reads: the MTP layer's hnorm(norm(h)), cuda_mtp_layer.h). in, out [rows, H] f32 (may
// alias), weight [H] bf16.
void launch_rmsnorm_f32(StreamRef s, const float *in, const bf16 *weight, float *out, int rows,
                        int H, float eps);

// ---- k_rope.cu ----
// Rotates q and k in place inside a fused qkv activation. Row t of qkv (stride
// row_stride elements) holds [q heads | k heads | v heads], each head_dim wide; pair i of
// a head is (i, i + head_dim/2) for neox, (2i, 2i + 1) for interleaved; its angle is
// positions[t] * inv_freq[i], and cos/sin are scaled by mscale (yarn's attention factor).
// With rot_dim < head_dim (a partial rotary factor, GLM-4.5) only a head's first rot_dim
// dimensions rotate, pairs (i, i + rot_dim/2) (or (2i, 2i + 1)); the rest pass through.
// qkv [T, row_stride] bf16, positions [T] i32, inv_freq [rot_dim/2] f32; rot_dim 0: head_dim.
void launch_rope(StreamRef s, bf16 *qkv, int T, int row_stride, int num_q_heads, int num_kv_heads,
                 int head_dim, const std::int32_t *positions, const float *inv_freq, float mscale,
                 bool interleaved, int rot_dim = 0);

// ---- k_qkv_post.cu ----
// Per-head fix-ups of a fused qkv activation before RoPE, in place: adds the projection
// bias (qwen2; bias [row_width] bf16, nullable), then RMSNorm over head_dim of every q
// head with q_norm and every k head with k_norm (qwen3; [head_dim] bf16, nullable).
// qkv [T, row_width] bf16 with row_width = (num_q_heads + 2 num_kv_heads) head_dim.
void launch_qkv_bias_norm(StreamRef s, bf16 *qkv, int T, int num_q_heads, int num_kv_heads,
                          int head_dim, const bf16 *bias, const bf16 *q_norm, const bf16 *k_norm,
                          float eps);

// y[r, c] += x[r, c] (rows) or x[c] (broadcast: a bias), in f32, rounded to bf16 once.
// Adds an o_proj bias to its output (gpt-oss) and a shared expert's output to the routed
// experts' sum (GLM-4.5). y [rows, cols] bf16; x [rows, cols] or [cols] bf16.
void launch_add_bf16(StreamRef s, bf16 *y, const bf16 *x, int rows, int cols, bool broadcast);

// ---- k_rows.cu ----
// The residual stream's rows as they stand after a layer: out[t * out_stride + i] =
// residual[t, i] + f32(pending[t, i]), the pending add (an o_proj or down_proj output
// that launch_add_rmsnorm folds into the next norm) included when given, without changing
// the residual. residual [T, H] f32, pending [T, H] bf16 (nullable), out [T, out_stride] f32.
void launch_residual_rows(StreamRef s, const float *residual, const bf16 *pending, int T, int H,
                          float *out, std::int64_t out_stride);
// out[i] = bf16(in[i]) (round to nearest even) and out[i] = f32(in[i]), n elements.
void launch_f32_to_bf16(StreamRef s, const float *in, bf16 *out, std::int64_t n);
void launch_bf16_to_f32(StreamRef s, const bf16 *in, float *out, std::int64_t n);
// out[t, :] = [a[t, :] ; b[t, :]]: a drafting head's concatenated input. a, b [T, H] bf16,
// out [T, 2H] bf16.
void launch_concat_rows(StreamRef s, const bf16 *a, const bf16 *b, int T, int H, bf16 *out);

// ---- k_swiglu.cu ----
// out[t, i] = silu(gate_up[t, i]) * gate_up[t, I + i]; gate_up [T, 2I] bf16, out [T, I] bf16.
void launch_swiglu(StreamRef s, const bf16 *gate_up, bf16 *out, int T, int I);

// ---- paged KV cache layout (k_kv_write.cu, k_attention.cu) ----
// One allocation of [num_blocks][num_layers][K|V][block_size][num_kv_heads][head_dim] bf16,
// so one block's bytes (all layers) are contiguous, as KvBlockStore promises.
// A block image: [layers][planes][block_size][num_kv_heads x head_dim] bf16. Split K/V
// (planes 2: K then V); the latent layout of MLA (KvLayout::kLatent, planes 1, one "head"
// of kv_values_per_token_layer values: [c | k_rope]) is [layers][block_size][values].
struct KvLayout {
  int num_layers = 0, block_size = 0, num_kv_heads = 0, head_dim = 0;
  int planes = 2;  // 2: K and V; 1: one latent row a token (MLA)
  __host__ __device__ std::int64_t slot_elems() const {
    return std::int64_t(num_kv_heads) * head_dim;
  }
  __host__ __device__ std::int64_t block_elems() const {
    return std::int64_t(num_layers) * planes * block_size * slot_elems();
  }
  // Element offset of (block, layer, kv = 0 for K or the latent row / 1 for V, slot in block).
  __host__ __device__ std::int64_t offset(std::int64_t block, int layer, int kv, int slot) const {
    return ((block * num_layers + layer) * planes + kv) * block_size * slot_elems() +
           std::int64_t(slot) * slot_elems();
  }
};

// ---- k_kv_write.cu ----
// Writes the k and v heads of each token row into the cache slot slots[t] (= block *
// block_size + slot); slots < 0 are skipped (padding). K starts at element k_offset of
// a qkv row, V at v_offset. qkv [T, row_stride] bf16, slots [T] i32.
void launch_kv_write(StreamRef s, const bf16 *qkv, int T, int row_stride, int k_offset,
                     int v_offset, const std::int32_t *slots, bf16 *cache, const KvLayout &layout,
                     int layer);

// ---- k_attention.cu ----
// A tile is up to tile_q consecutive query tokens of one sequence; all of them attend
// causally over that sequence's paged keys [0, pos0 + num_q).
struct AttnTile {
  std::int32_t q_start = 0;       // first query row in qkv / out
  std::int32_t num_q = 0;         // queries in this tile (<= tile_q)
  std::int32_t pos0 = 0;          // position of the first query
  std::int32_t block_offset = 0;  // first entry of the sequence's block table
};
struct AttnParams {
  const bf16 *qkv = nullptr;  // [T, row_stride]; q heads at the start of a row
  int row_stride = 0;
  const AttnTile *tiles = nullptr;  // [num_tiles] (device)
  int num_tiles = 0;
  int tile_q = 0;  // queries per tile; tile_q * (num_q_heads / num_kv_heads) <= kAttnMaxRows
  const std::int32_t *block_table = nullptr;  // device
  const bf16 *cache = nullptr;
  KvLayout layout;
  int layer = 0;
  int num_q_heads = 0;
  float scale = 0;              // softmax scale (1/sqrt(head_dim) unless the model says otherwise)
  int num_splits = 1;           // split-K over keys; > 1 needs the partial buffers
  float *partial_o = nullptr;   // [num_tiles, num_kv_heads, num_splits, kAttnMaxRows, head_dim]
  float *partial_ml = nullptr;  // [num_tiles, num_kv_heads, num_splits, kAttnMaxRows, 2]
  // Decode kernel with num_splits > 1: [num_tiles * num_kv_heads] counters, all zero
  // between launches. The last split block of a (tile, kv head) to finish then merges the
  // splits itself and sets the counter back to 0, instead of a combine kernel launch.
  // nullptr: the combine kernel.
  unsigned *split_counters = nullptr;
  bf16 *out = nullptr;  // [T, num_q_heads * head_dim]
  // Sliding-window attention (Mistral, Qwen2 with use_sliding_window): a query at
  // position p sees the keys at positions > p - window, as the CPU kernel and HF do.
  // 0: every key up to p.
  int window = 0;
  // Attention sinks (gpt-oss): one learned logit per q head, in the scores' units (not
  // scaled), that joins every row's softmax denominator (exp(sink - max)) with no value
  // row. nullptr: none. [num_q_heads] f32, per layer.
  const float *sinks = nullptr;
  // Shared memory a block may take (CudaFeatures::smem_per_block; the flash kernel's
  // pipeline depth follows it). 0: the device's own opt-in limit.
  std::size_t smem_per_block = 0;
};
constexpr int kAttnMaxRows = 32;  // query rows (tokens x heads of one kv group) per block
constexpr int kAttnMaxHeadDim = 256;
void launch_paged_attention(StreamRef s, const AttnParams &p);

// ---- k_attention_decode.cu ----
// The same contract for tiles that each hold exactly one query (decode steps), with
// split-K merged in the kernel when AttnParams::split_counters is set. Supported when
// decode_attention_supported(); otherwise use the general kernel.
bool decode_attention_supported(int num_q_heads, int num_kv_heads, int head_dim);
void launch_decode_attention(StreamRef s, const AttnParams &p);
// Merges split-K partials into p.out (used by both attention kernels).
void launch_attention_combine(StreamRef s, const AttnParams &p);

// ---- k_attention_flash.cu ----
// The same contract on the tensor cores for prefill tiles: up to kFlashRows rows (query
// tokens x the G q heads of one kv head) per tile, so tile_q <= kFlashRows / G; no
// split-K (p.num_splits is ignored: prefill has parallelism enough). head_dim 64 or 128.
// Two K/V tiles in flight where p.smem_per_block allows (head_dim 128 needs 102 KB), one
// otherwise (the 99 KB of sm_86/89/120).
constexpr int kFlashRows = 64;
bool flash_attention_supported(int num_q_heads, int num_kv_heads, int head_dim);
// K/V tiles in flight the launch uses at head_dim with smem_per_block bytes (0: 2).
int flash_attention_stages(int head_dim, std::size_t smem_per_block);
void launch_flash_attention(StreamRef s, const AttnParams &p);

// ---- k_sampling.cu ----
// Greedy: out[r] = argmax(logits[r, :]) (lowest index on ties, NaN never wins). logits
// [R, V] f32. With scratch (argmax_scratch_bytes(>= R) bytes) a row is split over several
// blocks when R is small (sized for num_sms); without it, one block per row.
constexpr int kArgmaxMaxParts = 64;
std::size_t argmax_scratch_bytes(int max_rows);
void launch_argmax(StreamRef s, const float *logits, int R, int V, std::int32_t *out,
                   void *scratch = nullptr, int num_sms = 0);

// ---- k_sample.cu ----
// Stochastic sampling with the CPU sampler's semantics (exec/sampler.cpp): penalties on
// a copy of each row (repetition, HF style, on every token seen; presence and frequency,
// OpenAI style, on generated ones), candidates sorted by (logit desc, id asc) with a
// stable segmented radix sort, then top-k, softmax at the temperature (double), top-p
// over the normalised cumulative sum, min-p, and the first candidate whose cumulative
// probability exceeds u * total. u comes from the request's own RNG on the host, so a
// seed gives the same stream on either path. Also the sampled token's logprob under the
// raw logits.
struct SampleRow {
  float inv_temperature = 0;  // 0: greedy
  std::int32_t top_k = 0;     // 0: off
  float top_p = 1, min_p = 0;
  float repetition_penalty = 1, presence_penalty = 0, frequency_penalty = 0;
  double u = 0;                                       // uniform in [0, 1)
  std::int32_t penalty_begin = 0, penalty_count = 0;  // range of this row's entries
};
struct PenaltyEntry {
  std::int32_t token = 0;            // seen in the prompt or the generated tokens
  std::int32_t generated_count = 0;  // occurrences among the generated tokens
};
// Device scratch bytes launch_sample needs for up to max_rows rows of V.
std::size_t sample_scratch_bytes(int max_rows, int V);
// logits [R, V] f32 (left unchanged), rows [R] and penalties (device), scratch of
// sample_scratch_bytes(>= R, V); out_tokens [R] i32, out_logprobs [R] f32.
void launch_sample(StreamRef s, const float *logits, int R, int V, const SampleRow *rows,
                   const PenaltyEntry *penalties, void *scratch, std::size_t scratch_bytes,
                   std::int32_t *out_tokens, float *out_logprobs);

}  // namespace keel::cuda
