// MLA's rope on the device (k_mla_attention.h's MlaRope), shared by the latent cache write,
// the simple attention kernel and the split one (each ropes q_rope at its query's position).
#pragma once

#include "exec/cuda/k_mla_attention.h"

namespace keel::cuda::mla_detail {

// Rotates the pair (x1, x2) of rope pair i at position pos into (y1, y2).
__device__ inline void rope_pair(int i, float pos, const MlaRope &rp, float x1, float x2, float &y1,
                                 float &y2) {
  float sn, cs;
  sincosf(pos * rp.inv_freq[i], &sn, &cs);
  cs *= rp.mscale;
  sn *= rp.mscale;
  y1 = x1 * cs - x2 * sn;
  y2 = x2 * cs + x1 * sn;
}

// The two values of rope pair i: (2i, 2i + 1) interleaved, else (i, i + rope / 2).
__device__ inline void rope_index(int i, int rope, bool interleaved, int &a, int &b) {
  a = interleaved ? 2 * i : i;
  b = interleaved ? 2 * i + 1 : i + rope / 2;
}

}  // namespace keel::cuda::mla_detail
