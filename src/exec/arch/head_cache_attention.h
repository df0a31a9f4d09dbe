// The attention of a drafting head's one decoder layer (an MTP layer, an EAGLE-3 head) over
// the head's own per-request cache, not the paged KV cache: the head sees a few positions
// a step, so it stays a plain loop.
#pragma once

#include <cstdint>
#include <vector>

namespace keel::arch {

// Writes the n new positions' k and v ([n, G, D] each) into `rows` (a row per position:
// k of the G KV heads, then v; sized by the caller to cover every pos[t]), then
// att[t, h] = softmax(q[t, h] . k[j, h / (H / G)] / sqrt(D)) v[j, ...] over the positions
// j in [0, pos[t]] (q [n, H, D], att [n, H, D]).
void head_cache_attention(const float *q, const float *k, const float *v, std::int64_t n,
                          std::int64_t H, std::int64_t G, std::int64_t D, const std::int32_t *pos,
                          std::vector<float> &rows, float *att);

}  // namespace keel::arch
