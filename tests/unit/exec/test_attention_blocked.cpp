// The blocked prefill attention against the per-token path and the double-precision
// reference, on random data: chunks not a multiple of the block sizes, a cached prefix
// (queries start mid-sequence), GQA / MQA / MHA, sliding windows, head sizes that take
// the SIMD and the portable kernels; and its independence of how a prompt is chunked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "exec/cpu/attention.h"
#include "exec/cpu/attention_blocked.h"

namespace keel::cpu {
namespace {

std::vector<float> randn(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto &x : v) x = nd(rng);
  return v;
}

struct SeqSpec {
  std::int64_t start, n;  // cached positions, positions computed now
};

// A paged cache holding the K/V of every sequence (block ids scrambled) and their plain
// copies for the reference.
struct Fixture {
  static constexpr std::int32_t kBlockSize = 16;
  std::int64_t G, D;
  CpuKvStore kv;
  std::vector<std::vector<std::int32_t>> tables;
  std::vector<std::vector<float>> k, v;

  Fixture(std::int64_t g, std::int64_t d, const std::vector<SeqSpec> &seqs)
      : G(g), D(d), kv(64, kBlockSize, 2, g, d) {
    std::vector<std::int32_t> ids(64);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
    std::size_t next = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const std::int64_t len = seqs[i].start + seqs[i].n;
      std::vector<std::int32_t> tab;
      for (std::int64_t b = 0; b < (len + kBlockSize - 1) / kBlockSize; ++b)
        tab.push_back(ids[next++]);
      k.push_back(randn(len * G * D, 100 + 2 * i));
      v.push_back(randn(len * G * D, 101 + 2 * i));
      for (std::int64_t p = 0; p < len; ++p)
        for (int kind = 0; kind < 2; ++kind) {
          const auto &src = kind == 0 ? k.back() : v.back();
          std::copy(src.begin() + p * G * D, src.begin() + (p + 1) * G * D,
                    kv.row(tab[p / kBlockSize], 1, kind, p % kBlockSize));
        }
      tables.push_back(tab);
    }
  }

  // Attention of positions [start, start + n) of each listed sequence in one batch.
  std::vector<float> run(const std::vector<std::int64_t> &which, const std::vector<SeqSpec> &parts,
                         const std::vector<float> &q, const AttentionShape &shape) {
    ForwardBatch b;
    std::vector<std::int32_t> seq, pos;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto &tab = tables[which[i]];
      b.seqs.push_back({static_cast<std::int32_t>(seq.size()),
                        static_cast<std::int32_t>(parts[i].n),
                        static_cast<std::int32_t>(parts[i].start),
                        static_cast<std::int32_t>(b.block_table.size()),
                        static_cast<std::int32_t>(tab.size()), SequenceSlice::Logits::kLast});
      b.block_table.insert(b.block_table.end(), tab.begin(), tab.end());
      for (std::int64_t j = 0; j < parts[i].n; ++j) {
        seq.push_back(static_cast<std::int32_t>(i));
        pos.push_back(static_cast<std::int32_t>(parts[i].start + j));
      }
    }
    b.tokens.assign(seq.size(), 0);
    std::vector<float> out(q.size(), std::nanf(""));
    ThreadPool pool(2);
    std::vector<std::vector<float>> scratch;
    paged_attention(q.data(), out.data(), b, seq.data(), pos.data(), kv, 1, shape, pool, scratch);
    return out;
  }
};

void check_against_per_token(std::int64_t H, std::int64_t G, std::int64_t D, std::int64_t window) {
  // A long chunk after a cached prefix, short prompts (tiles of one token) and a decode
  // step in one batch.
  const std::vector<SeqSpec> seqs = {{37, 150}, {0, 20}, {0, 9}, {12, 1}};
  Fixture f(G, D, seqs);
  std::int64_t T = 0;
  for (const auto &s : seqs) T += s.n;
  const auto q = randn(T * H * D, 5);
  AttentionShape shape{H, G, D, 1.0f / std::sqrt(static_cast<float>(D)), window};
  const auto blocked = f.run({0, 1, 2, 3}, seqs, q, shape);
  shape.blocked = false;
  const auto per_token = f.run({0, 1, 2, 3}, seqs, q, shape);
  std::vector<float> ref(q.size());
  std::int64_t t = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    attention_reference(q.data() + t * H * D, f.k[i].data(), f.v[i].data(), ref.data() + t * H * D,
                        seqs[i].n, seqs[i].start + seqs[i].n, shape);
    t += seqs[i].n;
  }
  std::size_t differ = 0;
  for (std::size_t i = 0; i < q.size(); ++i) {
    ASSERT_NEAR(blocked[i], ref[i], 2e-6f + 2e-6f * std::fabs(ref[i])) << i;
    ASSERT_NEAR(per_token[i], ref[i], 2e-6f + 2e-6f * std::fabs(ref[i])) << i;
    differ += blocked[i] != per_token[i];
  }
  // The blocked path was taken: its rounding differs from the per-token path somewhere.
  EXPECT_GT(differ, 0u);
}

TEST(BlockedAttention, GqaMatchesPerTokenPath) { check_against_per_token(8, 2, 64, 0); }
TEST(BlockedAttention, MhaSlidingWindowMatchesPerTokenPath) {
  check_against_per_token(4, 4, 64, 50);
}
TEST(BlockedAttention, MqaPortableHeadSizeMatchesPerTokenPath) {
  check_against_per_token(6, 1, 24, 0);
}
TEST(BlockedAttention, WideHeadWindowMatchesPerTokenPath) { check_against_per_token(4, 2, 80, 70); }

// A prompt computed as one chunk or as a long chunk, a short one, a decode step and a long
// one gives the same bits: key blocks are aligned to positions and rows never mix.
TEST(BlockedAttention, ChunkingDoesNotChangeResults) {
  const std::int64_t H = 8, G = 2, D = 64;
  Fixture f(G, D, {{37, 150}});
  const auto q = randn(150 * H * D, 9);
  const AttentionShape shape{H, G, D, 0.125f, 0};
  const auto whole = f.run({0}, {{37, 150}}, q, shape);
  std::int64_t done = 0;
  for (const std::int64_t n : {70, 5, 1, 74}) {
    const std::vector<float> qc(q.begin() + done * H * D, q.begin() + (done + n) * H * D);
    const auto part = f.run({0}, {{37 + done, n}}, qc, shape);
    for (std::size_t i = 0; i < part.size(); ++i)
      ASSERT_EQ(whole[done * H * D + i], part[i]) << done << " " << i;
    done += n;
  }
}

}  // namespace
}  // namespace keel::cpu
