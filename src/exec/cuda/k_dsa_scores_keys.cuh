// Which keys a block of the DSA scores kernels (k_dsa_indexer.cu's fp32 one, k_dsa_scores_mma.cu)
// takes: grid (ctas_per_row, rows), block (x, y) an even share of row y's positions [0, p] in
// whole tiles of `tile` keys, so that the grid depends on the rows alone (graph-safe).
#pragma once

#include "exec/cuda/k_dsa_indexer.h"

namespace keel::cuda::dsa_detail {

// False (uniform over the block) where the block has nothing to score: a row past the pass, a
// token whose p + 1 <= topk (every position is kept), or a share past the row's end.
__device__ inline bool scores_block_keys(const DsaScoreParams &p, int tile, int &t, DsaToken &tok,
                                         int &k_begin, int &k_end) {
  const int r = blockIdx.y;
  t = p.t0 + r;
  if (r >= p.rows || t >= p.T) return false;
  tok = p.tokens[t];
  const int n = tok.pos + 1;
  if (n <= p.topk) return false;
  const int tiles = (n + tile - 1) / tile;
  const int per = (tiles + p.ctas_per_row - 1) / p.ctas_per_row;
  k_begin = blockIdx.x * per * tile;
  k_end = min(n, k_begin + per * tile);
  return k_begin < k_end;
}

}  // namespace keel::cuda::dsa_detail
