// k_dsa_indexer.h alone against host references:
// - launch_dsa_topk: the exact set the CPU's rule keeps (DsaIndexer::select: the topk best,
//   ties to the earlier position) for distinct scores, for scores with many ties (-0 and +0
//   among them), for all-zero rows (every head's relu zero), at topk 16 and 2048 and rows of
//   17 to 131,072 positions (just above and far above topk, several queries a launch, fewer
//   scratch rows than queries, constant rows, signed zeros, one-bucket rows); rows with
//   p + 1 <= topk left untouched;
// - launch_dsa_key_write + launch_dsa_scores: the index keys (LayerNorm, rope) in the latent
//   rows of a paged cache and every query's scores against a double reference over the same
//   bf16 keys, both rope styles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "exec/cuda/k_dsa_indexer.h"

namespace keel::cuda {
namespace {

using test::download;
using test::from_bf16;
using test::to_bf16;
using test::upload;

// DsaIndexer::select's rule on the host.
std::vector<std::int32_t> host_topk(const std::vector<float> &s, int topk) {
  std::vector<std::int32_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](std::int32_t a, std::int32_t b) { return s[a] != s[b] ? s[a] > s[b] : a < b; });
  idx.resize(static_cast<std::size_t>(topk));
  std::sort(idx.begin(), idx.end());
  return idx;
}

TEST(DsaTopk, SelectsTheCpuSetWithTiesToTheEarlierPosition) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(11);
  const std::vector<int> lens = {5, 17, 100, 1000, 2049, 5000, 70000};
  for (const int topk : {16, 2048})
    for (const char *kind : {"distinct", "ties", "zeros"}) {
      const int rows = static_cast<int>(lens.size());
      const std::int64_t stride = 70000;
      std::vector<float> scores(static_cast<std::size_t>(rows * stride), 0.0f);
      std::vector<DsaToken> toks(rows);
      for (int r = 0; r < rows; ++r) {
        const int n = lens[r];
        toks[r].pos = n - 1;
        float *row = scores.data() + r * stride;
        if (std::string(kind) == "distinct") {
          std::vector<int> perm(n);
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), rng);
          for (int i = 0; i < n; ++i) row[i] = (static_cast<float>(perm[i]) - n / 3.0f) * 0.37f;
        } else if (std::string(kind) == "ties") {
          const float levels[] = {-1.0f, -0.0f, 0.0f, 0.5f, 2.0f, 2.0f, 0.0f};
          std::uniform_int_distribution<int> pick(0, 6);
          for (int i = 0; i < n; ++i) row[i] = levels[pick(rng)];
        }
      }
      constexpr std::int32_t kUntouched = -7;
      auto d_scores = upload(ctx, scores);
      auto d_toks = upload(ctx, toks);
      auto d_sel = upload(ctx, std::vector<std::int32_t>(rows * topk, kUntouched));
      DeviceBuffer scratch(dsa_topk_scratch_bytes(rows));
      launch_dsa_topk(ctx.compute(), d_scores.as<float>(), stride, d_toks.as<DsaToken>(), rows, 0,
                      rows, topk, d_sel.as<std::int32_t>(), scratch.data(), rows);
      const auto sel = download<std::int32_t>(ctx, d_sel, rows * topk);
      for (int r = 0; r < rows; ++r) {
        const int n = lens[r];
        std::vector<std::int32_t> got(sel.begin() + r * topk, sel.begin() + (r + 1) * topk);
        if (n <= topk) {
          EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](int v) { return v == kUntouched; }))
              << kind << " topk " << topk << " n " << n << ": a row that keeps all was written";
          continue;
        }
        const std::vector<float> row(scores.begin() + r * stride, scores.begin() + r * stride + n);
        const auto want = host_topk(row, topk);
        std::sort(got.begin(), got.end());
        int differ = 0;
        for (int i = 0; i < topk; ++i) differ += got[i] != want[i];
        EXPECT_EQ(differ, 0) << kind << " topk " << topk << " n " << n << ": " << differ << " of "
                             << topk << " positions differ (first got " << got[0] << " want "
                             << want[0] << ")";
      }
    }
}

// Runs launch_dsa_topk over rows of the given lengths (filled by `fill`) and counts, per row,
// the positions that differ from the CPU's rule (sorted sets; also duplicates / out of range).
template <class Fill>
void check_topk(const std::vector<int> &lens, int topk, int scratch_rows, const char *what,
                Fill fill) {
  CudaContext ctx;
  const int rows = static_cast<int>(lens.size());
  const std::int64_t stride = *std::max_element(lens.begin(), lens.end());
  std::vector<float> scores(static_cast<std::size_t>(rows * stride), 0.0f);
  std::vector<DsaToken> toks(rows);
  for (int r = 0; r < rows; ++r) {
    toks[r].pos = lens[r] - 1;
    fill(r, scores.data() + r * stride, lens[r]);
  }
  auto d_scores = upload(ctx, scores);
  auto d_toks = upload(ctx, toks);
  auto d_sel = upload(ctx, std::vector<std::int32_t>(std::size_t(rows) * topk, -7));
  DeviceBuffer scratch(dsa_topk_scratch_bytes(scratch_rows));
  // Twice: the scratch is reused (its counters must be reset by the call itself).
  for (int rep = 0; rep < 2; ++rep)
    launch_dsa_topk(ctx.compute(), d_scores.as<float>(), stride, d_toks.as<DsaToken>(), rows, 0,
                    rows, topk, d_sel.as<std::int32_t>(), scratch.data(), scratch_rows);
  const auto sel = download<std::int32_t>(ctx, d_sel, std::size_t(rows) * topk);
  for (int r = 0; r < rows; ++r) {
    const int n = lens[r];
    std::vector<std::int32_t> got(sel.begin() + std::size_t(r) * topk,
                                  sel.begin() + std::size_t(r + 1) * topk);
    if (n <= topk) {
      EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](int v) { return v == -7; }))
          << what << " n " << n << ": a row that keeps all was written";
      continue;
    }
    const std::vector<float> row(scores.begin() + r * stride, scores.begin() + r * stride + n);
    const auto want = host_topk(row, topk);
    std::sort(got.begin(), got.end());
    int differ = 0;
    for (int i = 0; i < topk; ++i) differ += got[i] != want[i];
    if (differ != 0)
      std::printf("dsa topk %s row %d n %d: %d of %d differ (got[0] %d want[0] %d)\n", what, r, n,
                  differ, topk, got[0], want[0]);
    EXPECT_EQ(differ, 0) << what << " row " << r << " n " << n;
  }
}

TEST(DsaTopk, LongContextsManyTiesAndSeveralQueries) {
  KEEL_REQUIRE_CUDA_DEVICE();
  constexpr int kTopk = 2048;
  const std::vector<int> lens = {2049, 2050, 2100, 4096, 16385, 65536, 131072, 131072};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // NaN-free random, as the indexer makes them (relu sums: many exact zeros, some negatives).
  check_topk(lens, kTopk, 3, "random", [&](int, float *row, int n) {
    for (int i = 0; i < n; ++i) {
      const float v = nd(rng);
      row[i] = i % 5 == 0 ? 0.0f : (i % 7 == 0 ? -v * v : v * v);
    }
  });
  // Every score equal: the first topk positions (the whole-row fallback at long rows).
  check_topk(lens, kTopk, 8, "constant", [&](int r, float *row, int n) {
    for (int i = 0; i < n; ++i) row[i] = r % 2 ? 0.25f : 0.0f;
  });
  // -0 and +0 interleaved, a few larger values: the zeros tie.
  check_topk(lens, kTopk, 8, "signed zeros", [&](int, float *row, int n) {
    for (int i = 0; i < n; ++i) row[i] = i % 97 == 0 ? 1.0f + i : (i % 2 ? -0.0f : 0.0f);
  });
  // Few repeated values spread through one bucket (candidate path with ties at the k-th).
  check_topk(lens, kTopk, 8, "repeated", [&](int, float *row, int n) {
    std::uniform_int_distribution<int> pick(0, 40);
    for (int i = 0; i < n; ++i) row[i] = 1.0f + 0.001f * pick(rng);
  });
  // Distinct values very close together (one 12-bit bucket holds all; > 16384 at long rows).
  check_topk(lens, kTopk, 8, "one bucket", [&](int, float *row, int n) {
    std::vector<int> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int i = 0; i < n; ++i) row[i] = 1.0f + static_cast<float>(perm[i] % 4096) * 1e-6f;
  });
  // Small topk, and rows at or under topk untouched.
  check_topk({1, 16, 17, 100, 70000}, 16, 2, "topk 16", [&](int, float *row, int n) {
    for (int i = 0; i < n; ++i) row[i] = static_cast<float>(static_cast<int>(nd(rng) * 4));
  });
}

// Host rope of pair i at `pos`, as the kernels (same float inputs, double arithmetic).
void host_rope(float *x, int rope, int pos, const std::vector<float> &freq, bool interleaved) {
  std::vector<float> y(x, x + rope);
  for (int i = 0; i < rope / 2; ++i) {
    const double ang = static_cast<double>(static_cast<float>(pos) * freq[i]);
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + rope / 2;
    y[a] = static_cast<float>(x[a] * std::cos(ang) - x[b] * std::sin(ang));
    y[b] = static_cast<float>(x[b] * std::cos(ang) + x[a] * std::sin(ang));
  }
  std::copy(y.begin(), y.end(), x);
}

TEST(DsaScores, KeysAndScoresMatchADoubleReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  constexpr int kHi = 8, kDi = 32, kRope = 8, kKeyAt = 16, kW = kKeyAt + kDi + 8, kBs = 4;
  constexpr int kT = 70, kTopk = 16, kLayers = 2, kLayer = 1;
  const std::vector<std::int32_t> table = {
      5, 2,  7,  0,  1,  3,  4,  6,  8,
      9, 10, 11, 12, 13, 14, 15, 16, 17};  // 18 blocks of 4 >= 70 positions
  CudaContext ctx;
  for (const bool interleaved : {true, false}) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    KvLayout layout;
    layout.num_layers = kLayers;
    layout.block_size = kBs;
    layout.num_kv_heads = 1;
    layout.head_dim = kW;
    layout.planes = 1;
    const std::size_t cache_elems = 18 * layout.block_elems();
    std::vector<float> k(kT * kDi), q(kT * kHi * kDi), w(kT * kHi), ln(2 * kDi);
    for (float &v : k) v = nd(rng) + 0.3f;
    for (float &v : q) v = nd(rng);
    for (float &v : w) v = nd(rng);
    for (int i = 0; i < kDi; ++i) ln[i] = 1.0f + 0.1f * nd(rng), ln[kDi + i] = 0.1f * nd(rng);
    std::vector<float> freq(kRope / 2);
    for (int i = 0; i < kRope / 2; ++i)
      freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / kRope));
    std::vector<std::int32_t> pos(kT), slots(kT);
    std::vector<DsaToken> toks(kT);
    for (int t = 0; t < kT; ++t) {
      pos[t] = t;
      slots[t] = table[t / kBs] * kBs + t % kBs;
      toks[t].pos = t;
      toks[t].block_offset = 0;
    }
    auto d_cache = upload(ctx, std::vector<std::uint16_t>(cache_elems, 0));
    auto d_k = upload(ctx, k);
    auto d_q = upload(ctx, q);
    auto d_w = upload(ctx, w);
    auto d_ln = upload(ctx, ln);
    auto d_freq = upload(ctx, freq);
    auto d_pos = upload(ctx, pos);
    auto d_slots = upload(ctx, slots);
    auto d_toks = upload(ctx, toks);
    auto d_table = upload(ctx, table);
    auto d_scores = upload(ctx, std::vector<float>(kT * kT, -99.0f));
    MlaRope rp;
    rp.inv_freq = d_freq.as<float>();
    rp.interleaved = interleaved;
    launch_dsa_key_write(ctx.compute(), d_k.as<float>(), kT, kDi, kDi, d_ln.as<float>(),
                         d_pos.as<std::int32_t>(), rp, kRope, d_slots.as<std::int32_t>(),
                         d_cache.as<bf16>(), layout, kLayer, kKeyAt);
    DsaScoreParams p;
    p.q = d_q.as<float>();
    p.w = d_w.as<float>();
    p.w_stride = kHi;
    p.tokens = d_toks.as<DsaToken>();
    p.block_table = d_table.as<std::int32_t>();
    p.cache = d_cache.as<bf16>();
    p.layout = layout;
    p.layer = kLayer;
    p.key_at = kKeyAt;
    p.Hi = kHi;
    p.Di = kDi;
    p.rope = kRope;
    p.rp = rp;
    p.topk = kTopk;
    p.T = kT;
    p.t0 = 0;
    p.rows = kT;
    p.scores = d_scores.as<float>();
    p.stride = kT;
    p.ctas_per_row = 2;
    launch_dsa_scores(ctx.compute(), p);
    const auto cache = from_bf16(download<std::uint16_t>(ctx, d_cache, cache_elems));
    const auto scores = download<float>(ctx, d_scores, kT * kT);

    // The keys: LayerNorm in double, rope, against the stored bf16.
    std::vector<std::vector<float>> keys(kT);
    double key_err = 0;
    for (int t = 0; t < kT; ++t) {
      const float *x = k.data() + t * kDi;
      double mean = 0, var = 0;
      for (int i = 0; i < kDi; ++i) mean += x[i];
      mean /= kDi;
      for (int i = 0; i < kDi; ++i) var += (x[i] - mean) * (x[i] - mean);
      var /= kDi;
      std::vector<float> y(kDi);
      for (int i = 0; i < kDi; ++i)
        y[i] = static_cast<float>((x[i] - mean) / std::sqrt(var + 1e-6) * ln[i] + ln[kDi + i]);
      host_rope(y.data(), kRope, t, freq, interleaved);
      const std::size_t at = layout.offset(table[t / kBs], kLayer, 0, t % kBs) + kKeyAt;
      keys[t].assign(cache.begin() + at, cache.begin() + at + kDi);
      for (int i = 0; i < kDi; ++i)
        key_err = std::max(key_err, std::abs(double(keys[t][i]) - y[i]) / (1.0 + std::abs(y[i])));
    }
    EXPECT_LT(key_err, 1e-2) << "interleaved " << interleaved;
    // The scores over the stored keys, in double.
    double worst = 0, biggest = 0;
    int unscored = 0, scored_short = 0;
    for (int t = 0; t < kT; ++t) {
      std::vector<float> qr(q.begin() + t * kHi * kDi, q.begin() + (t + 1) * kHi * kDi);
      for (int h = 0; h < kHi; ++h) host_rope(qr.data() + h * kDi, kRope, t, freq, interleaved);
      for (int s = 0; s <= t; ++s) {
        const float got = scores[t * kT + s];
        if (t + 1 <= kTopk) {
          scored_short += got != -99.0f;
          continue;
        }
        double ref = 0;
        for (int h = 0; h < kHi; ++h) {
          double d = 0;
          for (int i = 0; i < kDi; ++i) d += double(qr[h * kDi + i]) * keys[s][i];
          d /= std::sqrt(double(kDi));
          if (d > 0) ref += double(w[t * kHi + h]) / std::sqrt(double(kHi)) * d;
        }
        unscored += got == -99.0f;
        worst = std::max(worst, std::abs(got - ref));
        biggest = std::max(biggest, std::abs(ref));
      }
    }
    std::printf("dsa scores (interleaved %d): key error %.3g, max |score - ref| %.3g of %.3g\n",
                interleaved, key_err, worst, biggest);
    EXPECT_EQ(unscored, 0);
    EXPECT_EQ(scored_short, 0) << "rows with p + 1 <= topk are not scored";
    EXPECT_LT(worst, 1e-4 * std::max(biggest, 1.0));
  }
}

// One launch_dsa_scores configuration against a double reference over the same bf16 keys;
// the defaults are GLM-5's indexer (32 heads of 128, rope 64, the key at 576 of its 704-value
// latent row) on the tensor cores.
struct ScoreCase {
  const char *what = "";
  int Hi = 32, Di = 128, rope = 64;
  bool interleaved = false;
  int key_at = 576, row = 704, block_size = 64, layers = 1, layer = 0, topk = 64;
  std::vector<int> lens;                  // positions each sequence holds
  std::vector<std::pair<int, int>> rows;  // (sequence, position) of each query token
  std::vector<int> ctas = {0};            // ctas_per_row to run; 0: dsa_scores_ctas_per_row
  bool mma = true;                        // DsaScoreParams::mma
  bool want_mma = true;                   // the kernel launch_dsa_scores should pick
  bool bf16_check = false;                // also show that bf16-rounded q fails the bound
};

// The bound on |score - reference| as a fraction of the row's largest |reference|. q split
// into bf16 hi + lo carries it to ~2^-16 relative (an rms of ~1e-6 of a dot product), the
// fp32 kernel to ~2^-24 per step: both stay below 1e-5 of the row's largest score (measured
// figures are printed). q rounded to bf16 alone (2^-9 relative) moves the scores by ~1e-3 of
// the row's largest: 100x the bound (bf16_check computes it on the host).
constexpr double kScoreBound = 1e-5;

void check_scores(const ScoreCase &sc) {
  SCOPED_TRACE(sc.what);
  CudaContext ctx;
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int Hi = sc.Hi, Di = sc.Di, bs = sc.block_size, T = static_cast<int>(sc.rows.size());
  KvLayout layout;
  layout.num_layers = sc.layers;
  layout.block_size = bs;
  layout.num_kv_heads = 1;
  layout.head_dim = sc.row;
  layout.planes = 1;
  // Every sequence's blocks drawn from one shuffled pool (plus 3 never referenced): the
  // tables interleave the sequences' blocks in no order.
  const int seqs = static_cast<int>(sc.lens.size());
  std::vector<int> table_at(seqs + 1, 0);
  for (int q = 0; q < seqs; ++q) table_at[q + 1] = table_at[q] + (sc.lens[q] + bs - 1) / bs;
  const int blocks = table_at[seqs] + 3;
  std::vector<std::int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  // The cache bf16 NaN everywhere but the index keys: a read outside them shows.
  std::vector<std::uint16_t> cache(std::size_t(blocks) * layout.block_elems(), 0x7fc0);
  std::vector<std::vector<float>> keys(seqs);
  for (int q = 0; q < seqs; ++q) {
    keys[q].resize(std::size_t(sc.lens[q]) * Di);
    for (int i = 0; i < sc.lens[q]; ++i) {
      const std::size_t at =
          layout.offset(table[table_at[q] + i / bs], sc.layer, 0, i % bs) + sc.key_at;
      for (int d = 0; d < Di; ++d) {
        const std::uint16_t b = f32_to_bf16(nd(rng));
        cache[at + d] = b;
        keys[q][std::size_t(i) * Di + d] = bf16_to_f32(b);
      }
    }
  }
  const int w_stride = Hi + 5;
  std::vector<float> q(std::size_t(T) * Hi * Di), w(std::size_t(T) * w_stride);
  for (float &v : q) v = nd(rng);  // full fp32 mantissas: bf16 q would not be exact
  for (float &v : w) v = nd(rng);
  std::vector<float> freq(sc.rope / 2);
  for (int i = 0; i < sc.rope / 2; ++i)
    freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / sc.rope));
  std::vector<DsaToken> toks(T);
  int max_len = 0;
  for (int t = 0; t < T; ++t) {
    toks[t].pos = sc.rows[t].second;
    toks[t].block_offset = table_at[sc.rows[t].first];
    max_len = std::max(max_len, toks[t].pos + 1);
  }
  const std::int64_t stride = max_len + 3;  // odd: rows at any 4-byte offset
  constexpr float kSentinel = -99.0f;

  // The reference: q roped on the host (float, as the kernels), products in double.
  std::vector<std::vector<double>> ref(T), ref_bf16(T);
  for (int t = 0; t < T; ++t) {
    const int n = toks[t].pos + 1;
    if (n <= sc.topk) continue;
    std::vector<float> qr(q.begin() + std::size_t(t) * Hi * Di,
                          q.begin() + std::size_t(t + 1) * Hi * Di);
    for (int h = 0; h < Hi; ++h)
      host_rope(qr.data() + h * Di, sc.rope, toks[t].pos, freq, sc.interleaved);
    const bool with_bf16 = sc.bf16_check && t == 0;
    for (int pass = 0; pass < (with_bf16 ? 2 : 1); ++pass) {
      std::vector<double> qd(qr.begin(), qr.end());
      if (pass == 1)
        for (double &v : qd) v = bf16_to_f32(f32_to_bf16(static_cast<float>(v)));
      std::vector<double> &out = pass == 0 ? ref[t] : ref_bf16[t];
      out.assign(n, 0.0);
      const float *kq = keys[sc.rows[t].first].data();
      for (int s = 0; s < n; ++s) {
        double sum = 0;
        for (int h = 0; h < Hi; ++h) {
          double d = 0;
          for (int i = 0; i < Di; ++i) d += qd[h * Di + i] * kq[std::size_t(s) * Di + i];
          d /= std::sqrt(double(Di));
          if (d > 0) sum += double(w[std::size_t(t) * w_stride + h]) / std::sqrt(double(Hi)) * d;
        }
        out[s] = sum;
      }
    }
  }
  auto row_max = [](const std::vector<double> &r) {
    double m = 0;
    for (const double v : r) m = std::max(m, std::abs(v));
    return m;
  };
  if (sc.bf16_check) {
    ASSERT_FALSE(ref_bf16[0].empty()) << "the first row must select";
    double worst = 0;
    for (std::size_t s = 0; s < ref[0].size(); ++s)
      worst = std::max(worst, std::abs(ref_bf16[0][s] - ref[0][s]));
    const double rel = worst / row_max(ref[0]);
    std::printf("dsa scores %s: bf16-rounded q would be off by %.3g of the row's max\n", sc.what,
                rel);
    EXPECT_GT(rel, 10 * kScoreBound) << "the bound would not catch a bf16-rounded q";
  }

  auto d_cache = upload(ctx, cache);
  auto d_table = upload(ctx, table);
  auto d_q = upload(ctx, q);
  auto d_w = upload(ctx, w);
  auto d_freq = upload(ctx, freq);
  auto d_toks = upload(ctx, toks);
  for (const int ctas : sc.ctas) {
    auto d_scores = upload(ctx, std::vector<float>(std::size_t(T) * stride, kSentinel));
    DsaScoreParams p;
    p.q = d_q.as<float>();
    p.w = d_w.as<float>();
    p.w_stride = w_stride;
    p.tokens = d_toks.as<DsaToken>();
    p.block_table = d_table.as<std::int32_t>();
    p.cache = d_cache.as<bf16>();
    p.layout = layout;
    p.layer = sc.layer;
    p.key_at = sc.key_at;
    p.Hi = Hi;
    p.Di = Di;
    p.rope = sc.rope;
    p.rp.inv_freq = d_freq.as<float>();
    p.rp.interleaved = sc.interleaved;
    p.topk = sc.topk;
    p.T = T;
    p.stride = stride;
    p.mma = sc.mma;
    EXPECT_EQ(dsa_scores_uses_mma(p), sc.want_mma);
    // Two passes, as the runner's: rows [0, T / 2), then the rest.
    for (const int t0 : {0, T / 2}) {
      p.t0 = t0;
      p.rows = t0 == 0 ? T / 2 : T - T / 2;
      p.scores = d_scores.as<float>() + std::int64_t(t0) * stride;
      p.ctas_per_row = ctas > 0 ? ctas : dsa_scores_ctas_per_row(p, max_len, ctx.num_sms());
      launch_dsa_scores(ctx.compute(), p);
    }
    const auto got = download<float>(ctx, d_scores, std::size_t(T) * stride);
    double worst = 0;
    int bad = 0, written_past = 0;
    for (int t = 0; t < T; ++t) {
      const int n = toks[t].pos + 1;
      const float *g = got.data() + std::size_t(t) * stride;
      const bool scored = n > sc.topk;
      for (std::int64_t s = scored ? n : 0; s < stride; ++s) written_past += g[s] != kSentinel;
      if (!scored) continue;
      const double top = std::max(row_max(ref[t]), 1e-30);
      for (int s = 0; s < n; ++s) {
        const double e = std::abs(double(g[s]) - ref[t][s]) / top;
        if (!(e <= kScoreBound)) {  // NaN too
          if (bad < 5)
            std::printf("dsa scores %s ctas %d: row %d (pos %d) key %d: %.9g, want %.9g\n", sc.what,
                        ctas, t, toks[t].pos, s, g[s], ref[t][s]);
          ++bad;
        }
        if (std::isfinite(e)) worst = std::max(worst, e);
      }
    }
    std::printf("dsa scores %s (%s) ctas %d: max |score - ref| %.3g of the row's max\n", sc.what,
                sc.want_mma ? "mma" : "fp32", ctas, worst);
    EXPECT_EQ(bad, 0) << "ctas " << ctas << ": scores over " << kScoreBound << " of the row's max";
    EXPECT_EQ(written_past, 0) << "ctas " << ctas
                               << ": written past p or in a row with p + 1 <= topk";
  }
}

// GLM-5's indexer on the tensor cores: contexts that are and are not multiples of the 32-key
// warp tile, rows of one sequence at different positions, of several sequences with shuffled
// blocks, rows that keep every position; layer 1 of 2; a row's keys over 1 block, a few and the
// runner's count.
TEST(DsaScores, TensorCoresMatchADoubleReferenceAtGlm5Dims) {
  KEEL_REQUIRE_CUDA_DEVICE();
  ScoreCase c;
  c.what = "glm-5";
  c.layers = 2;
  c.layer = 1;
  c.lens = {5001, 2100, 97, 4133};
  c.rows = {{0, 5000}, {1, 2099}, {0, 4999}, {1, 63},   {0, 4096},
            {1, 64},   {2, 96},   {3, 4132}, {3, 1023}, {2, 31}};
  c.ctas = {1, 5, 0};
  c.bf16_check = true;
  check_scores(c);
}

// Other head counts (1 and 4 m16 tiles), interleaved rope, other rope widths, small blocks.
TEST(DsaScores, TensorCoresOtherHeadCountsAndRope) {
  KEEL_REQUIRE_CUDA_DEVICE();
  ScoreCase c;
  c.what = "16 heads, interleaved";
  c.Hi = 16;
  c.interleaved = true;
  c.key_at = 16;
  c.row = 152;
  c.block_size = 16;
  c.topk = 16;
  c.lens = {3001, 300};
  c.rows = {{0, 3000}, {1, 299}, {0, 17}, {1, 15}};
  c.ctas = {0, 3};
  check_scores(c);
  c.what = "64 heads, rope 32";
  c.Hi = 64;
  c.rope = 32;
  c.interleaved = false;
  c.key_at = 8;
  c.row = 144;
  c.block_size = 32;
  c.layers = 2;
  c.lens = {1537, 77};
  c.rows = {{0, 1536}, {1, 76}, {0, 700}};
  c.ctas = {0, 2};
  check_scores(c);
}

// A row at GLM-5's 128k context (and one at 100k) with its index_topk.
TEST(DsaScores, TensorCoresAt131072Positions) {
  KEEL_REQUIRE_CUDA_DEVICE();
  ScoreCase c;
  c.what = "131072";
  c.key_at = 8;  // a narrow latent row keeps the cache at 38 MB
  c.row = 144;
  c.topk = 2048;
  c.lens = {131072};
  c.rows = {{0, 131071}, {0, 100000}};
  check_scores(c);
}

// The fp32 kernel: shapes the tensor-core one does not take (Di 48; 8 heads), and GLM-5's
// with DsaScoreParams::mma off; the same bound.
TEST(DsaScores, Fp32FallbackMatchesADoubleReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  ScoreCase c;
  c.what = "glm-5, mma off";
  c.mma = c.want_mma = false;
  c.lens = {4133, 97};
  c.rows = {{0, 4132}, {1, 96}, {0, 1023}};
  c.ctas = {0, 3};
  check_scores(c);
  c.what = "Di 48";
  c.mma = true;
  c.Di = 48;
  c.rope = 16;
  c.key_at = 8;
  c.row = 64;
  c.block_size = 16;
  c.topk = 16;
  c.lens = {2001, 50};
  c.rows = {{0, 2000}, {1, 49}, {0, 33}};
  c.ctas = {0, 2};
  check_scores(c);
  c.what = "8 heads";
  c.Hi = 8;
  c.Di = 128;
  c.rope = 64;
  c.row = 144;
  c.block_size = 64;
  c.lens = {1000};
  c.rows = {{0, 999}, {0, 500}};
  c.ctas = {0};
  check_scores(c);
}

}  // namespace
}  // namespace keel::cuda
