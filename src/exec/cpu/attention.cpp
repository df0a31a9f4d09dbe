#include "exec/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "exec/cpu/activation.h"
#include "exec/cpu/attention_blocked.h"

namespace keel::cpu {

namespace {
float dot(const float *a, const float *b, std::int64_t n) {
  float acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// softmax over x[0..n) and the sink logit together, writing only x's probabilities.
void softmax_with_sink(float *x, std::int64_t n, float sink) {
  float mx = sink;
  for (std::int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = std::exp(sink - mx);
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int64_t i = 0; i < n; ++i) x[i] *= inv;
}
}  // namespace

void paged_attention(const float *q, float *out, const ForwardBatch &batch,
                     const std::int32_t *token_seq, const std::int32_t *token_pos,
                     const CpuKvStore &kv, std::int64_t layer, const AttentionShape &shape,
                     ThreadPool &pool, std::vector<std::vector<float>> &thread_scores) {
  const std::int64_t H = shape.heads, D = shape.head_dim;
  const std::int64_t group = H / shape.kv_heads;
  const std::int32_t bs = kv.block_size();
  // The blocked path takes the whole batch when every sequence has consecutive positions
  // (as the runner builds them); otherwise each (token, head) is computed alone.
  bool use_blocked = shape.blocked;
  for (const SequenceSlice &s : batch.seqs)
    for (std::int32_t i = 0; use_blocked && i < s.num_tokens; ++i)
      use_blocked = token_pos[s.token_offset + i] == s.start_pos + i;
  if (use_blocked) {
    std::vector<std::int32_t> all(batch.seqs.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int32_t>(i);
    blocked_attention(q, out, batch, all, kv, layer, shape, pool, thread_scores);
    return;
  }
  const std::int64_t T = batch.total_tokens();
  if (static_cast<int>(thread_scores.size()) < pool.size()) thread_scores.resize(pool.size());
  const std::int64_t tasks = T * H;
  // Chunks of (token, head) tasks claimed by whichever thread is free (a few per thread, so
  // that one the OS has not scheduled holds up little); a task's result does not depend
  // on the thread.
  const int chunks = static_cast<int>(std::min<std::int64_t>(tasks, 8 * pool.size()));
  pool.run_chunks(chunks, [&](int c, int slot) {
    auto &scores = thread_scores[slot];
    const std::int64_t a = tasks * c / chunks, b = tasks * (c + 1) / chunks;
    for (std::int64_t task = a; task < b; ++task) {
      const std::int64_t t = task / H, h = task % H, g = h / group;
      const SequenceSlice &s = batch.seqs[token_seq[t]];
      const std::int32_t *table = batch.block_table.data() + s.block_offset;
      const std::int64_t p = token_pos[t];
      const std::int64_t lo =
          shape.window > 0 ? std::max<std::int64_t>(0, p - shape.window + 1) : 0;
      const std::int64_t n = p - lo + 1;
      if (static_cast<std::int64_t>(scores.size()) < n) scores.resize(n);
      const float *qv = q + (t * H + h) * D;
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t pos = lo + j;
        const float *kr =
            kv.row(table[pos / bs], layer, 0, static_cast<std::int32_t>(pos % bs)) + g * D;
        scores[j] = dot(qv, kr, D) * shape.scale;
      }
      if (shape.sinks) {
        softmax_with_sink(scores.data(), n, shape.sinks[h]);
      } else {
        softmax(scores.data(), n);
      }
      float *o = out + (t * H + h) * D;
      std::fill(o, o + D, 0.0f);
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t pos = lo + j;
        const float *vr =
            kv.row(table[pos / bs], layer, 1, static_cast<std::int32_t>(pos % bs)) + g * D;
        const float w = scores[j];
        for (std::int64_t d = 0; d < D; ++d) o[d] += w * vr[d];
      }
    }
  });
}

void attention_reference(const float *q, const float *k, const float *v, float *out, std::int64_t n,
                         std::int64_t len, const AttentionShape &shape) {
  const std::int64_t H = shape.heads, G = shape.kv_heads, D = shape.head_dim, group = H / G;
  std::vector<double> sc(len);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t p = len - n + i;
    const std::int64_t lo = shape.window > 0 ? std::max<std::int64_t>(0, p - shape.window + 1) : 0;
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / group;
      const double sink = shape.sinks ? static_cast<double>(shape.sinks[h]) : -INFINITY;
      double mx = shape.sinks ? sink : -1e300;
      for (std::int64_t j = lo; j <= p; ++j) {
        double s = 0;
        for (std::int64_t d = 0; d < D; ++d)
          s += static_cast<double>(q[(i * H + h) * D + d]) * k[(j * G + g) * D + d];
        sc[j] = s * shape.scale;
        mx = std::max(mx, sc[j]);
      }
      double sum = shape.sinks ? std::exp(sink - mx) : 0.0;
      for (std::int64_t j = lo; j <= p; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
      for (std::int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (std::int64_t j = lo; j <= p; ++j) o += sc[j] / sum * v[(j * G + g) * D + d];
        out[(i * H + h) * D + d] = static_cast<float>(o);
      }
    }
  }
}

}  // namespace keel::cpu
