// The fused decode kernels (k_decode_fused.h): the GEMV with each prologue/epilogue
// against a double-precision host reference, the qkv/RoPE/KV-write kernel against the
// three kernels it replaces (bit for bit), both with and without programmatic dependent
// launch; then whole runners with the fused path against the unfused one, with bf16
// weights and with GGUF blocks kept quantized (the integer-dot GEMV, fused_linear.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <string>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/k_decode_fused.h"
#include "formats/make_model.h"

namespace keel::cuda {
namespace {

using test::download;
using test::from_bf16;
using test::rel_err;
using test::to_bf16;
using test::upload;

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// The input row m as the kernel stages it (bf16-rounded), from the host copies.
std::vector<float> reference_input(GemvIn in, const std::vector<float> &x,
                                   const std::vector<float> &residual,
                                   const std::vector<std::int32_t> &rows,
                                   const std::vector<float> &norm_w, int M, int K, float eps) {
  std::vector<float> out(std::size_t(M) * K);
  for (int m = 0; m < M; ++m) {
    if (in == GemvIn::kBf16) {
      std::copy_n(x.begin() + std::size_t(m) * K, K, out.begin() + std::size_t(m) * K);
    } else {
      const float *r = residual.data() + std::size_t(rows.empty() ? m : rows[m]) * K;
      double ss = 0;
      for (int k = 0; k < K; ++k) ss += double(r[k]) * r[k];
      const double inv = 1.0 / std::sqrt(ss / K + eps);
      for (int k = 0; k < K; ++k)
        out[std::size_t(m) * K + k] = round_bf16(static_cast<float>(r[k] * inv * norm_w[k]));
    }
  }
  return out;
}

void check_gemv(CudaContext &ctx, GemvIn in, GemvOut out, int M, int N, int K, bool with_rows,
                bool pdl, std::mt19937 &rng, int mma = -1) {
  SCOPED_TRACE("in " + std::to_string(int(in)) + " out " + std::to_string(int(out)) + " M " +
               std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K) +
               (pdl ? " pdl" : "") + (fused_gemv_uses_mma(M, K, mma) ? " mma" : " cuda cores"));
  const int res_rows = M + 3;
  const auto x = test::random_bf16_values(std::size_t(M) * K, rng, -2.0f, 2.0f);
  const auto w = test::random_bf16_values(std::size_t(N) * K, rng);
  std::vector<float> residual(std::size_t(res_rows) * K);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  for (auto &v : residual) v = dist(rng);
  const auto norm_w = test::random_bf16_values(K, rng, 0.5f, 1.5f);
  std::vector<std::int32_t> rows;
  if (with_rows)
    for (int m = 0; m < M; ++m) rows.push_back((m * 2 + 1) % res_rows);
  const float eps = 1e-5f;
  const auto xin = reference_input(in, x, residual, rows, norm_w, M, K, eps);
  std::vector<double> ref(std::size_t(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k)
        acc += double(xin[std::size_t(m) * K + k]) * w[std::size_t(n) * K + k];
      ref[std::size_t(m) * N + n] = acc;
    }
  auto x_src = upload(ctx, to_bf16(x));
  DeviceBuffer d_x(x_src.bytes());
  auto d_w = upload(ctx, to_bf16(w));
  auto d_res = upload(ctx, residual);
  auto d_norm = upload(ctx, to_bf16(norm_w));
  auto d_rows = upload(ctx, rows.empty() ? std::vector<std::int32_t>{0} : rows);
  // kAddResidual adds into an [M, N] f32 buffer with its own random start values.
  std::vector<float> start(std::size_t(M) * N);
  for (auto &v : start) v = dist(rng);
  DeviceBuffer y =
      out == GemvOut::kAddResidual ? upload(ctx, start) : DeviceBuffer(std::size_t(M) * N * 4);
  if (out != GemvOut::kAddResidual) test::poison(ctx, y);
  // The kernel before it on the stream writes the input the GEMV reads (x poisoned, then
  // gathered in): under PDL the GEMV starts early and must still wait for it.
  test::poison(ctx, d_x);
  std::vector<std::int32_t> identity(M);
  for (int m = 0; m < M; ++m) identity[m] = m;
  auto d_identity = upload(ctx, identity);
  launch_gather_rows(ctx.compute(), x_src.as<bf16>(), d_identity.as<std::int32_t>(), M, K,
                     d_x.as<bf16>());
  FusedGemvParams p;
  p.w = d_w.as<bf16>();
  p.N = N;
  p.K = K;
  p.M = M;
  p.in = in;
  p.x = d_x.as<bf16>();
  p.residual = d_res.as<float>();
  p.rows = with_rows ? d_rows.as<std::int32_t>() : nullptr;
  p.norm_weight = d_norm.as<bf16>();
  p.eps = eps;
  p.out = out;
  p.y = y.data();
  p.pdl = pdl;
  p.mma = mma;
  launch_fused_gemv(ctx.compute(), p, ctx.num_sms());
  std::vector<float> got, want(ref.size());
  if (out == GemvOut::kBf16) {
    got = from_bf16(download<std::uint16_t>(ctx, y, ref.size()));
    for (std::size_t i = 0; i < ref.size(); ++i) want[i] = static_cast<float>(ref[i]);
    EXPECT_LT(rel_err(got, want), 6e-3);
  } else if (out == GemvOut::kF32) {
    got = download<float>(ctx, y, ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) want[i] = static_cast<float>(ref[i]);
    EXPECT_LT(rel_err(got, want), 1e-5);
  } else if (out == GemvOut::kAddResidual) {
    got = download<float>(ctx, y, ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i)
      want[i] = static_cast<float>(start[i] + round_bf16(static_cast<float>(ref[i])));
    EXPECT_LT(rel_err(got, want), 2e-3);
  } else {  // kSwiglu: rows [0, N/2) are gate, [N/2, N) up; output [M, N/2]
    const int I = N / 2;
    got = from_bf16(download<std::uint16_t>(ctx, y, std::size_t(M) * I));
    want.resize(std::size_t(M) * I);
    for (int m = 0; m < M; ++m)
      for (int i = 0; i < I; ++i) {
        const double g = round_bf16(static_cast<float>(ref[std::size_t(m) * N + i]));
        const double u = round_bf16(static_cast<float>(ref[std::size_t(m) * N + I + i]));
        want[std::size_t(m) * I + i] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
      }
    EXPECT_LT(rel_err(got, want), 6e-3);
  }
}

TEST(CudaFusedGemv, EveryPrologueAndEpilogueMatchesReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(21);
  // K: inside one unrolled pass (40), exactly 8 x 256 (2048), a tail (4104), and many
  // unrolled passes with a tail (16400), one more 32-value span than the 8 warps split
  // evenly (16416); N not a multiple of the warps per block nor of the tensor-core
  // kernel's 16-row groups, and larger than the persistent grid's warps. M <= 4 on both
  // kernels (mma 0 and 1; K not a multiple of 32 always on the CUDA cores), M > 4 on the
  // tensor cores only (so K a multiple of 32).
  for (bool pdl : {false, true})
    for (int M = 1; M <= kFusedGemvMaxM; ++M)
      for (auto [N, K] :
           {std::array<int, 2>{77, 40}, {333, 2048}, {129, 4104}, {35, 16400}, {35, 16416}})
        for (int mma : {0, 1}) {
          if (M > kFusedGemvCoreMaxM && (mma == 0 || K % 32 != 0)) continue;
          // A staged (normed) input of M x K beyond shared memory is refused (M >= 7 at K =
          // 16416); a bf16 one on the tensor cores is read from L2 and runs.
          const bool staged_fits = fused_gemv_staged_bytes(M, K, GemvIn::kRmsNorm, mma) <=
                                   std::min<std::size_t>(ctx.features().smem_per_block, 200 << 10);
          check_gemv(ctx, GemvIn::kBf16, GemvOut::kBf16, M, N, K, false, pdl, rng, mma);
          check_gemv(ctx, GemvIn::kBf16, GemvOut::kAddResidual, M, N, K, false, pdl, rng, mma);
          if (!staged_fits) continue;
          check_gemv(ctx, GemvIn::kRmsNorm, GemvOut::kBf16, M, N, K, false, pdl, rng, mma);
          check_gemv(ctx, GemvIn::kRmsNorm, GemvOut::kSwiglu, M, 2 * N, K, false, pdl, rng, mma);
        }
  // The LM head: norm of selected residual rows, f32 out, more rows than the grid's warps.
  check_gemv(ctx, GemvIn::kRmsNorm, GemvOut::kF32, 3, 40000, 256, true, true, rng);
  check_gemv(ctx, GemvIn::kRmsNorm, GemvOut::kF32, 1, 40000, 256, true, false, rng);
  check_gemv(ctx, GemvIn::kRmsNorm, GemvOut::kF32, 8, 40000, 256, true, true, rng);
  // Which kernel runs: M > 4 and (by default) M >= 2 on the tensor cores where K allows.
  EXPECT_FALSE(fused_gemv_uses_mma(1, 4096));
  EXPECT_TRUE(fused_gemv_uses_mma(1, 4096, 1));
  EXPECT_TRUE(fused_gemv_uses_mma(2, 4096));
  EXPECT_FALSE(fused_gemv_uses_mma(3, 4096, 0));
  EXPECT_TRUE(fused_gemv_uses_mma(6, 4096, 0));
  EXPECT_FALSE(fused_gemv_uses_mma(2, 4104, 1));
}

TEST(CudaFusedGemv, RejectsWhatItCannotRun) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  DeviceBuffer buf(1 << 16);
  const std::size_t smem = ctx.features().smem_per_block;
  EXPECT_FALSE(fused_gemv_supported(0, 64, smem));
  EXPECT_FALSE(fused_gemv_supported(kFusedGemvMaxM + 1, 64, smem));
  EXPECT_FALSE(fused_gemv_supported(1, 60, smem));
  EXPECT_TRUE(fused_gemv_supported(4, 4104, smem));
  EXPECT_FALSE(fused_gemv_supported(5, 4104, smem));  // the tensor-core kernel: K in spans of 32
  EXPECT_TRUE(fused_gemv_supported(5, 4128, smem));
  // The 8B down projection at 8 rows: a bf16 input on the tensor cores stages nothing.
  EXPECT_TRUE(fused_gemv_supported(8, 14336, smem, GemvIn::kBf16));
  EXPECT_FALSE(fused_gemv_supported(8, 14336, smem, GemvIn::kRmsNorm));
  EXPECT_EQ(fused_gemv_staged_bytes(8, 14336, GemvIn::kBf16), 0u);
  EXPECT_EQ(fused_gemv_staged_bytes(2, 14336, GemvIn::kBf16, 0), 2u * 14336 * 2);
  EXPECT_FALSE(fused_gemv_supported(4, 1 << 20, smem));  // staged input beyond shared memory
  // 4 x 14336 bf16 = 112 KB: within Hopper's 227 KB per block, beyond the 99 KB of an
  // sm_86/89/120 GPU (the baseline), where 2 rows (56 KB) still fit.
  EXPECT_TRUE(fused_gemv_supported(4, 14336, 227 * 1024));
  EXPECT_FALSE(fused_gemv_supported(4, 14336, kBaselineSmemPerBlock));
  EXPECT_TRUE(fused_gemv_supported(2, 14336, kBaselineSmemPerBlock));
  FusedGemvParams p;
  p.w = buf.as<bf16>();
  p.x = buf.as<bf16>();
  p.y = buf.data();
  p.N = 4;
  p.K = 60;
  p.M = 1;
  EXPECT_THROW(launch_fused_gemv(ctx.compute(), p, ctx.num_sms()), Error);
  p.K = 64;
  p.x = buf.as<bf16>() + 1;  // misaligned
  EXPECT_THROW(launch_fused_gemv(ctx.compute(), p, ctx.num_sms()), Error);
  p.x = buf.as<bf16>();
  p.out = GemvOut::kSwiglu;  // not an instantiated combination (kBf16 in)
  EXPECT_THROW(launch_fused_gemv(ctx.compute(), p, ctx.num_sms()), Error);
}

// Elements of two bf16 arrays further apart than one bf16 rounding step (the compiler may
// contract a multiply-add differently in the two kernels; anything else is a bug).
int count_mismatches(const std::vector<std::uint16_t> &a, const std::vector<std::uint16_t> &b) {
  int bad = a.size() == b.size() ? 0 : 1 << 30;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const float x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
    if (!(std::abs(x - y) <= 8e-3f * std::max(std::abs(x), std::abs(y)) + 1e-6f)) ++bad;
  }
  return bad;
}

// One fused launch against launch_qkv_bias_norm + launch_rope + launch_kv_write: the same
// arithmetic in the same order, so qkv and the cache must match to the last bf16 step.
TEST(CudaQkvRopeKv, MatchesTheThreeKernelsItReplaces) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(23);
  struct Case {
    int nq, nkv, hd;
    bool bias, norm, interleaved, pdl;
  };
  for (const Case c :
       {Case{4, 2, 32, false, false, false, false}, Case{8, 2, 64, true, false, true, true},
        Case{32, 8, 128, false, true, false, true}, Case{12, 4, 16, true, true, false, false},
        Case{4, 4, 256, true, true, true, true}}) {
    SCOPED_TRACE("hd " + std::to_string(c.hd) + (c.bias ? " bias" : "") + (c.norm ? " norm" : "") +
                 (c.interleaved ? " interleaved" : "") + (c.pdl ? " pdl" : ""));
    const int T = 5, width = (c.nq + 2 * c.nkv) * c.hd;
    KvLayout layout{3, 16, c.nkv, c.hd};
    const int layer = 1, blocks = 4;
    const auto qkv = test::random_bf16_values(std::size_t(T) * width, rng, -2.0f, 2.0f);
    const auto bias = test::random_bf16_values(width, rng);
    const auto qn = test::random_bf16_values(c.hd, rng, 0.5f, 1.5f);
    const auto kn = test::random_bf16_values(c.hd, rng, 0.5f, 1.5f);
    std::vector<float> inv_freq(c.hd / 2);
    for (int i = 0; i < c.hd / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / c.hd);
    const std::vector<std::int32_t> positions = {0, 7, 100, 4095, 33};
    const std::vector<std::int32_t> slots = {5, -1, 17, 63, 40};  // -1: padding, not stored
    auto d_pos = upload(ctx, positions);
    auto d_slots = upload(ctx, slots);
    auto d_freq = upload(ctx, inv_freq);
    auto d_bias = upload(ctx, to_bf16(bias));
    auto d_qn = upload(ctx, to_bf16(qn));
    auto d_kn = upload(ctx, to_bf16(kn));
    const std::size_t cache_elems = std::size_t(blocks) * layout.block_elems();
    std::vector<std::uint16_t> cache0(cache_elems);
    for (auto &v : cache0) v = f32_to_bf16(std::uniform_real_distribution<float>(-1, 1)(rng));
    auto qkv_a = upload(ctx, to_bf16(qkv)), qkv_b = upload(ctx, to_bf16(qkv));
    auto cache_a = upload(ctx, cache0), cache_b = upload(ctx, cache0);
    const bf16 *b = c.bias ? d_bias.as<bf16>() : nullptr;
    const bf16 *q_norm = c.norm ? d_qn.as<bf16>() : nullptr;
    const bf16 *k_norm = c.norm ? d_kn.as<bf16>() : nullptr;
    const StreamRef s = ctx.compute();
    launch_qkv_bias_norm(s, qkv_a.as<bf16>(), T, c.nq, c.nkv, c.hd, b, q_norm, k_norm, 1e-6f);
    launch_rope(s, qkv_a.as<bf16>(), T, width, c.nq, c.nkv, c.hd, d_pos.as<std::int32_t>(),
                d_freq.as<float>(), 0.9f, c.interleaved);
    launch_kv_write(s, qkv_a.as<bf16>(), T, width, c.nq * c.hd, (c.nq + c.nkv) * c.hd,
                    d_slots.as<std::int32_t>(), cache_a.as<bf16>(), layout, layer);
    QkvRopeKvParams p;
    p.qkv = qkv_b.as<bf16>();
    p.T = T;
    p.num_q_heads = c.nq;
    p.num_kv_heads = c.nkv;
    p.head_dim = c.hd;
    p.bias = b;
    p.q_norm = q_norm;
    p.k_norm = k_norm;
    p.eps = 1e-6f;
    p.positions = d_pos.as<std::int32_t>();
    p.inv_freq = d_freq.as<float>();
    p.mscale = 0.9f;
    p.interleaved = c.interleaved;
    p.slots = d_slots.as<std::int32_t>();
    p.cache = cache_b.as<bf16>();
    p.layout = layout;
    p.layer = layer;
    p.pdl = c.pdl;
    launch_qkv_rope_kv(s, p);
    const auto qa = download<std::uint16_t>(ctx, qkv_a, qkv.size());
    const auto qb = download<std::uint16_t>(ctx, qkv_b, qkv.size());
    EXPECT_EQ(count_mismatches(qa, qb), 0);
    EXPECT_GT(count_mismatches(qa, to_bf16(qkv)), width);  // RoPE changed the rows
    const auto ca = download<std::uint16_t>(ctx, cache_a, cache_elems);
    const auto cb = download<std::uint16_t>(ctx, cache_b, cache_elems);
    EXPECT_EQ(count_mismatches(ca, cb), 0);
    EXPECT_GT(count_mismatches(ca, cache0), 3 * c.nkv * c.hd);  // 4 tokens stored K and V
  }
}

ModelConfig fused_config(int variant) {
  ModelConfig c;
  c.arch_name = "llama";
  c.vocab_size = 1000;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 2;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;  // the decode attention kernel
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 4096;
  if (variant == 1) {  // qwen2/qwen3-like extras, general attention kernel (head_dim 32)
    c.head_dim = 32;
    c.attention_bias = true;
    c.qk_norm = true;
    c.rope_style = RopeStyle::kInterleaved;
    c.tie_word_embeddings = true;
    c.intermediate_size = 344;
  }
  return c;
}

CudaRunnerOptions fused_options(bool graphs, int fused_max_m, bool pdl) {
  CudaRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 128;
  o.max_batch_tokens = 256;
  o.max_seqs = 8;
  o.max_logits_rows = 8;
  o.max_model_len = 512;
  o.cuda_graphs = graphs;
  o.kernels.fused_decode_max_m = fused_max_m;
  o.programmatic_launch = pdl;
  return o;
}

void add_seq(ForwardBatch &b, const std::vector<TokenId> &tokens, int from, int n, int first_block,
             SequenceSlice::Logits logits) {
  SequenceSlice s;
  s.token_offset = b.total_tokens();
  s.num_tokens = n;
  s.start_pos = from;
  s.block_offset = static_cast<int>(b.block_table.size());
  s.num_blocks = (from + n + 15) / 16;
  s.logits = logits;
  for (int i = 0; i < s.num_blocks; ++i) b.block_table.push_back(first_block + i);
  b.tokens.insert(b.tokens.end(), tokens.begin() + from, tokens.begin() + from + n);
  b.seqs.push_back(s);
}

// Decode steps of 1..5 sequences (5: past the fused cap, the unfused path), graphs on and
// off, PDL on and off: the fused runner against an unfused one with the same weights.
TEST(CudaFusedRunner, DecodeMatchesUnfusedPath) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  for (int variant : {0, 1})
    for (auto [graphs, pdl] : {std::array<bool, 2>{true, true}, {false, true}, {true, false}}) {
      SCOPED_TRACE("variant " + std::to_string(variant) + (graphs ? " graphs" : "") +
                   (pdl ? " pdl" : ""));
      const ModelConfig cfg = fused_config(variant);
      CudaModelRunner plain(ctx, cfg, std::uint64_t{91}, fused_options(graphs, 0, pdl));
      CudaRunnerOptions fo = fused_options(graphs, 4, pdl);
      if (!graphs) fo.kernels.attn_split_cap = 2;  // fewer splits than the unfused runner's
      CudaModelRunner fused(ctx, cfg, std::uint64_t{91}, fo);
      ASSERT_EQ(fused.fused_decode_max_m(), 4);
      ASSERT_EQ(plain.fused_decode_max_m(), 0);
      std::mt19937 rng(29 + variant);
      const int n = 5, steps = 10;
      std::vector<std::vector<TokenId>> toks(n);
      std::vector<int> pos(n);
      ForwardOutput o1, o2;
      for (int i = 0; i < n; ++i) {
        pos[i] = 3 + static_cast<int>(rng() % 150);
        toks[i].resize(pos[i] + steps);
        for (auto &t : toks[i]) t = static_cast<TokenId>(rng() % cfg.vocab_size);
        ForwardBatch b;
        add_seq(b, toks[i], 0, pos[i], 16 * i, SequenceSlice::Logits::kNone);
        plain.forward(b, o1);
        fused.forward(b, o2);
      }
      for (int step = 0; step < steps; ++step) {
        const int k = 1 + step % n;  // 1, 2, 3, 4, 5 sequences
        ForwardBatch b;
        for (int i = 0; i < k; ++i)
          add_seq(b, toks[i], pos[i]++, 1, 16 * i, SequenceSlice::Logits::kLast);
        plain.forward(b, o1);
        fused.forward(b, o2);
        ASSERT_EQ(o1.row_seq, o2.row_seq);
        ASSERT_EQ(o1.logits.size(), o2.logits.size());
        EXPECT_LT(rel_err(o2.logits, o1.logits), 1e-2) << "step " << step << " k " << k;
        std::vector<TokenId> t2;
        for (int i = 0; i < k; ++i) --pos[i];
        ForwardBatch again;
        for (int i = 0; i < k; ++i)
          add_seq(again, toks[i], pos[i]++, 1, 16 * i, SequenceSlice::Logits::kLast);
        fused.forward_greedy(again, t2);  // the same step again: same cache writes
        ASSERT_EQ(t2.size(), std::size_t(k));
        for (int r = 0; r < k; ++r) {
          const float *row = o2.logits.data() + std::size_t(r) * cfg.vocab_size;
          EXPECT_EQ(t2[r], std::max_element(row, row + cfg.vocab_size) - row);
        }
      }
      if (graphs) {
        EXPECT_GE(fused.graphs_captured(), 3u);
      }
    }
}

// GGUF weights kept quantized: the fused path stays on (it was off for any quantized
// weight) and runs every linear layer on the integer-dot GEMV with the norm in its
// prologue and the residual add / SwiGLU in its epilogue, q|k|v as two ranges (Q4_K_M puts
// v_proj in Q6_K) and the LM head Q6_K; or Q8_0 with a tied bf16 head. Against the same
// file's unfused runner, whose few-row steps take the same GEMV after separate norm and
// SwiGLU kernels: both stage the same bf16 inputs as int8, so the logits agree to the
// rounding of those kernels (1e-2, as the bf16 runners above).
TEST(CudaFusedRunner, QuantizedDecodeMatchesUnfusedPath) {
  KEEL_REQUIRE_CUDA_DEVICE();
  namespace fs = std::filesystem;
  CudaContext ctx;
  for (auto [dtype, mix] : {std::pair{DType::kQ4_K, true}, std::pair{DType::kQ8_0, false}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + (mix ? "_m" : ""));
    const fs::path dir =
        fs::temp_directory_path() / ("keel_fused_quant_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    MakeModelOptions mo;
    mo.arch = "llama";
    mo.hidden = 256;
    mo.intermediate = 768;
    mo.layers = 2;
    mo.heads = 4;
    mo.kv_heads = 2;
    mo.head_dim = 64;
    mo.vocab = 512;
    mo.tie = !mix;
    mo.dtype = dtype;
    mo.k_quant_mix = mix;
    mo.gguf = true;
    mo.seed = 31;
    mo.threads = 1;
    mo.out = dir / "m.gguf";
    make_model(mo);
    CudaRunnerOptions po = fused_options(true, 0, true), fo = fused_options(true, 4, true);
    po.quantized_weights = fo.quantized_weights = QuantizedWeights::kOn;
    // The same fused runner with the quantized GEMV on its tensor-core kernel at every M
    // (fused steps and the unfused 5-row step's run_linear).
    CudaRunnerOptions mo_opts = fo;
    mo_opts.kernels.qgemv_mma_min_m = 1;
    auto plain = CudaModelRunner::open(mo.out, ctx, po);
    auto fused = CudaModelRunner::open(mo.out, ctx, fo);
    auto fused_mma = CudaModelRunner::open(mo.out, ctx, mo_opts);
    fs::remove_all(dir);
    EXPECT_NE(fused->weight_format().find(mix ? "q4_k+q6_k" : "q8_0"), std::string::npos)
        << fused->weight_format();
    ASSERT_EQ(fused->fused_decode_max_m(), 4);
    ASSERT_EQ(plain->fused_decode_max_m(), 0);
    const std::int64_t V = fused->config().vocab_size;
    std::mt19937 rng(37);
    const int n = 5, steps = 10;
    std::vector<std::vector<TokenId>> toks(n);
    std::vector<int> pos(n);
    ForwardOutput o1, o2, o3;
    for (int i = 0; i < n; ++i) {
      pos[i] = 3 + static_cast<int>(rng() % 100);
      toks[i].resize(pos[i] + steps);
      for (auto &t : toks[i]) t = static_cast<TokenId>(rng() % V);
      ForwardBatch b;
      add_seq(b, toks[i], 0, pos[i], 16 * i, SequenceSlice::Logits::kNone);
      plain->forward(b, o1);
      fused->forward(b, o2);
      fused_mma->forward(b, o3);
    }
    for (int step = 0; step < steps; ++step) {
      const int k = 1 + step % n;  // 1..4 fused, 5 unfused on both
      ForwardBatch b;
      for (int i = 0; i < k; ++i)
        add_seq(b, toks[i], pos[i]++, 1, 16 * i, SequenceSlice::Logits::kLast);
      plain->forward(b, o1);
      fused->forward(b, o2);
      fused_mma->forward(b, o3);
      ASSERT_EQ(o1.logits.size(), o2.logits.size());
      ASSERT_EQ(o1.logits.size(), o3.logits.size());
      for (float x : o2.logits) ASSERT_TRUE(std::isfinite(x));
      for (float x : o3.logits) ASSERT_TRUE(std::isfinite(x));
      EXPECT_LT(rel_err(o2.logits, o1.logits), 1e-2) << "step " << step << " k " << k;
      EXPECT_LT(rel_err(o3.logits, o1.logits), 1e-2) << "mma step " << step << " k " << k;
    }
    EXPECT_GE(fused->graphs_captured(), 3u);
  }
}

// A short prefill (3 tokens, all logits) fits the fused cap too: it must match as well.
TEST(CudaFusedRunner, TinyPrefillMatchesUnfusedPath) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const ModelConfig cfg = fused_config(1);
  CudaModelRunner plain(ctx, cfg, std::uint64_t{93}, fused_options(false, 0, true));
  CudaModelRunner fused(ctx, cfg, std::uint64_t{93}, fused_options(false, 4, true));
  const std::vector<TokenId> toks = {5, 17, 999, 0, 250, 3};
  ForwardOutput o1, o2;
  for (int from : {0, 3}) {
    ForwardBatch b;
    add_seq(b, toks, from, 3, 0, SequenceSlice::Logits::kAll);
    plain.forward(b, o1);
    fused.forward(b, o2);
    ASSERT_EQ(o1.logits.size(), 3u * cfg.vocab_size);
    EXPECT_LT(rel_err(o2.logits, o1.logits), 1e-2) << from;
  }
}

}  // namespace
}  // namespace keel::cuda
