// DeepSeek Sparse Attention's indexer on the CUDA runner (glm_moe_dsa; exec/arch/dsa_indexer.h
// has the math and the CPU's rule): the index key of each token into the tail of its latent
// cache row, the scores of every earlier position for each query, and the top index_topk
// of them per query, which launch_mla_attention (k_mla_attention.h) then reads alone.
//
//   k_idx = rope(LayerNorm(wk h))      written at row[key_at .. key_at + Di) of the latent row
//   q_idx = rope(wq_b q_lat)           [T, Hi, Di] (roped here, as the scores stage it)
//   w     = weights_proj h * Hi^-1/2   [T, Hi]
//   score(t, s) = sum_h w[t, h] relu(q_idx[t, h] . k_idx[s] * Di^-1/2), s in [0, p]
// Rope on the first `rope` values of each Di-vector, with the latent row's table and style.
// A query at position p with p + 1 <= topk keeps every position: nothing is selected and the
// attention reads 0..p as without DSA.
#pragma once

#include <cstdint>

#include "exec/cuda/k_mla_attention.h"

namespace keel::cuda {

// A token's position and the first block-table entry of its sequence (from the step's tiles).
struct DsaToken {
  std::int32_t pos = 0;
  std::int32_t block_offset = 0;
};

// tokens[t] for every query of every tile (each token is in exactly one tile).
void launch_dsa_tokens(StreamRef s, const AttnTile *tiles, int num_tiles, DsaToken *tokens);

// For each token t with slots[t] >= 0: row[key_at + i] of its latent cache row =
// rope(LayerNorm(k[t * k_stride + i]) * ln[i] + ln[Di + i]) for i < Di (LayerNorm in fp32,
// eps 1e-6; ln [2, Di] f32: weight, then bias).
void launch_dsa_key_write(StreamRef s, const float *k, int T, int k_stride, int Di, const float *ln,
                          const std::int32_t *positions, const MlaRope &rp, int rope,
                          const std::int32_t *slots, bf16 *cache, const KvLayout &layout, int layer,
                          int key_at);

struct DsaScoreParams {
  const float *q = nullptr;  // [T, Hi, Di] f32 (wq_b q_lat, not roped)
  const float *w = nullptr;  // w[t * w_stride + h]: weights_proj h (not scaled)
  int w_stride = 0;
  const DsaToken *tokens = nullptr;  // [T]
  const std::int32_t *block_table = nullptr;
  const bf16 *cache = nullptr;
  KvLayout layout;  // the latent cache (planes 1)
  int layer = 0;
  int key_at = 0;  // where the index key starts in a latent row (kv_lora + rope)
  int Hi = 0, Di = 0, rope = 0;
  MlaRope rp;
  int topk = 0;
  // This pass: tokens [t0, t0 + rows) of T, row r's scores at scores + r * stride (stride at
  // least every scored p + 1). Tokens whose p + 1 <= topk are skipped.
  int T = 0, t0 = 0, rows = 0;
  float *scores = nullptr;
  std::int64_t stride = 0;
  int ctas_per_row = 1;  // the keys of a row split over this many blocks
  // The tensor-core kernel where it takes the shape (k_dsa_scores_mma.h: Di 128, Hi a multiple
  // of 16 up to 128); false: the fp32 one everywhere (cuda_mla_bench's comparison, the tests).
  bool mma = true;
};

// Bytes of the fp32 scores kernel's dynamic shared memory (the staged q, weights and keys).
std::size_t dsa_scores_smem(int Hi, int Di);

// Whether launch_dsa_scores runs p on the tensor-core kernel.
bool dsa_scores_uses_mma(const DsaScoreParams &p);

// DsaScoreParams::ctas_per_row for a pass of p.rows rows of at most max_keys positions: about
// as many blocks as are resident at once on num_sms SMs (the keys split at run time, so the
// grid does not depend on the positions: graph-safe), no more than there are key tiles.
int dsa_scores_ctas_per_row(const DsaScoreParams &p, int max_keys, int num_sms);

// scores[r, s] for s in [0, p] of each token t0 + r that selects; positions past p and tokens
// whose p + 1 <= topk are not written. On the tensor cores (q split into bf16 hi + lo: about
// fp32's precision) where dsa_scores_uses_mma, else the fp32 kernel on CUDA cores. Throws
// Error(kInvalidArgument) on shapes neither takes (Di not a multiple of 8, rope odd or over Di;
// the fp32 kernel: Di over 256, shared memory over 48 KB).
void launch_dsa_scores(StreamRef s, const DsaScoreParams &p);

// For each token t = t0 + r (r < rows, t < T) with n = tokens[t].pos + 1 > topk: sel[t * topk
// + i], i < topk, = the topk positions of scores[r * stride .. + n) with the highest scores,
// ties to the earlier position (the CPU's rule), in no particular order. Multi-block: a
// histogram of the top 12 bits of the scores' ordered bits over many blocks a row, the keys
// above the threshold bucket out directly, the bucket's keys (<= 16384) resolved by a radix
// select on (key, position); a bucket fuller than that (mass exact ties) falls back to one
// block reading the row. In passes of scratch_rows rows; scratch: dsa_topk_scratch_bytes
// (scratch_rows) bytes. Graph-safe (launch shapes depend on rows only, no host sync).
std::size_t dsa_topk_scratch_bytes(int rows);
void launch_dsa_topk(StreamRef s, const float *scores, std::int64_t stride, const DsaToken *tokens,
                     int T, int t0, int rows, int topk, std::int32_t *sel, void *scratch,
                     int scratch_rows);

}  // namespace keel::cuda
