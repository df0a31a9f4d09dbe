// Kernel-level timing of MLA's absorbed attention (launch_mla_attention, k_mla_attention.h)
// over a random latent cache: decode queries (one per sequence) at a given context, the
// split path with the runner's split factor (AttentionPlan::splits_latent), optionally the
// simple kernel beside it; achieved GB/s of latent rows read (kv_lora + rope bf16 a key and
// query, each row counted once per query) against --bw.
//
//   cuda_mla_bench [--model deepseek-v3|glm-5] [--contexts 2048,32768,131072] [--queries 1,64]
//     [--topk 0|2048] [--splits N] [--iters 20] [--bw 3.35e12] [--simple] [--dsa-fp32]
//     [--dsa-ctas N]
//   --topk K: each query reads a random selection of K of its positions (DSA); 0: all.
//   --splits N: force the split factor; --simple: also time the simple kernel (slow at 128k).
//   With --model glm-5 and --topk K: also the DSA indexer alone per layer (launch_dsa_scores,
//   then launch_dsa_topk over those scores; 32 index heads of 128, random keys), as the
//   runner launches them (rows = queries, dsa_scores_ctas_per_row blocks a row, or
//   --dsa-ctas N, in the splits column). The scores' row gives their time in us (each launch
//   after a 256 MB write that evicts the L2: the keys of one query at 128k, 32 MB, would
//   otherwise stay there from launch to launch), the keys' GB/s (Di bf16 a key and query) and
//   the bytes floor at --bw in us; --dsa-fp32 also times the fp32 kernel (the fallback).
#include <cstdio>

#if !defined(KEEL_WITH_CUDA)
int main() {
  std::puts("cuda_mla_bench: built without CUDA");
  return 0;
}
#else
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_args.h"
#include "core/error.h"
#include "exec/cuda/cuda_attention_plan.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_context.h"
#include "exec/cuda/k_dsa_indexer.h"
#include "exec/cuda/k_fill.h"
#include "exec/cuda/k_mla_attention.h"

namespace {

using namespace keel;
using namespace keel::cuda;

struct Shape {
  int H, nope, rope, v, R, tail;  // tail: the DSA index key after the latent row
};

template <typename T>
DeviceBuffer upload(const CudaContext &ctx, const std::vector<T> &h) {
  DeviceBuffer d(std::max<std::size_t>(1, h.size() * sizeof(T)));
  KEEL_CUDA_CHECK(cudaMemcpy(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Seconds a launch, each timed alone by events after a write of `flush` (larger than the
// L2) has evicted what the previous one read: the keys come from HBM as in a model step.
template <typename F>
double time_cold(const CudaContext &ctx, int iters, DeviceBuffer &flush, F &&launch) {
  const cudaStream_t s = ctx.compute().get("time_cold");
  launch();
  cudaEvent_t e0, e1;
  KEEL_CUDA_CHECK(cudaEventCreate(&e0));
  KEEL_CUDA_CHECK(cudaEventCreate(&e1));
  double total = 0;
  for (int i = 0; i < iters; ++i) {
    KEEL_CUDA_CHECK(cudaMemsetAsync(flush.data(), i & 0xff, flush.bytes(), s));
    KEEL_CUDA_CHECK(cudaEventRecord(e0, s));
    launch();
    KEEL_CUDA_CHECK(cudaEventRecord(e1, s));
    KEEL_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    KEEL_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    total += ms * 1e-3;
  }
  KEEL_CUDA_CHECK(cudaEventDestroy(e0));
  KEEL_CUDA_CHECK(cudaEventDestroy(e1));
  return total / iters;
}

// Seconds a launch, averaged over `iters` back-to-back launches after one warm-up.
template <typename F>
double time_launches(const CudaContext &ctx, int iters, F &&launch) {
  launch();
  KEEL_CUDA_CHECK(cudaDeviceSynchronize());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) launch();
  KEEL_CUDA_CHECK(cudaDeviceSynchronize());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

int run(int argc, char **argv) {
  std::string model = "deepseek-v3";
  std::vector<int> contexts = {2048, 32768, 131072}, queries = {1, 64};
  int topk = 0, force_splits = 0, iters = 20;
  double bw = 3.35e12;
  bool simple = false, dsa_fp32 = false;
  int dsa_ctas = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(ErrorCode::kInvalidArgument, a + ": a value expected");
      return argv[++i];
    };
    if (a == "--model")
      model = next();
    else if (a == "--contexts")
      contexts = bench::int_list(next());
    else if (a == "--queries")
      queries = bench::int_list(next());
    else if (a == "--topk")
      topk = std::stoi(next());
    else if (a == "--splits")
      force_splits = std::stoi(next());
    else if (a == "--iters")
      iters = std::stoi(next());
    else if (a == "--bw")
      bw = std::stod(next());
    else if (a == "--simple")
      simple = true;
    else if (a == "--dsa-fp32")
      dsa_fp32 = true;
    else if (a == "--dsa-ctas")
      dsa_ctas = std::stoi(next());
    else
      throw Error(ErrorCode::kInvalidArgument, "cuda_mla_bench: unknown flag " + a);
  }
  // The released configs' attention dims (DeepSeek-V3: 128 heads; GLM-5: 64, DSA key 128).
  const Shape sh =
      model == "glm-5" ? Shape{64, 192, 64, 256, 512, 128} : Shape{128, 128, 64, 128, 512, 0};
  CudaContext ctx;
  const StreamRef s = ctx.compute();
  constexpr int bs = 64;
  std::printf("| model | context | queries | topk | splits | kernel | us | GB/s rows | of bw |\n");
  for (const int n : queries)
    for (const int context : contexts) {
      KvLayout layout;
      layout.num_layers = 1;
      layout.block_size = bs;
      layout.num_kv_heads = 1;
      layout.head_dim = sh.R + sh.rope + sh.tail;
      layout.planes = 1;
      const int per_seq = (context + bs - 1) / bs;
      DeviceBuffer cache(std::size_t(n) * per_seq * layout.block_elems() * sizeof(bf16));
      launch_fill_uniform(s, cache.as<bf16>(), std::int64_t(n) * per_seq * layout.block_elems(), 7,
                          -1.0f, 1.0f);
      DeviceBuffer q(std::size_t(n) * sh.H * (sh.nope + sh.rope) * sizeof(bf16));
      launch_fill_uniform(s, q.as<bf16>(), std::int64_t(n) * sh.H * (sh.nope + sh.rope), 8, -1, 1);
      DeviceBuffer kv_b(std::size_t(sh.H) * (sh.nope + sh.v) * sh.R * sizeof(bf16));
      launch_fill_uniform(s, kv_b.as<bf16>(), std::int64_t(sh.H) * (sh.nope + sh.v) * sh.R, 9,
                          -0.05f, 0.05f);
      std::vector<float> freqs(sh.rope / 2);
      for (int i = 0; i < sh.rope / 2; ++i) freqs[i] = std::pow(10000.0f, -2.0f * i / sh.rope);
      std::vector<AttnTile> tiles;
      std::vector<std::int32_t> table(std::size_t(n) * per_seq);
      std::iota(table.begin(), table.end(), 0);
      AttentionPathConfig pc;
      pc.num_sms = ctx.num_sms();
      AttentionPlan plan(pc);
      for (int t = 0; t < n; ++t) {
        tiles.push_back({t, 1, context - 1, t * per_seq});
        plan.add_sequence(t, 1, context - 1, t * per_seq);
      }
      const bool sparse = topk > 0 && context > topk;
      std::vector<std::int32_t> sel(sparse ? std::size_t(n) * topk : 0);
      std::mt19937 rng(5);
      for (int t = 0; sparse && t < n; ++t) {
        std::vector<std::int32_t> all(context);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        std::copy_n(all.begin(), topk, sel.begin() + std::size_t(t) * topk);
      }
      auto d_tiles = upload(ctx, tiles), d_table = upload(ctx, table), d_sel = upload(ctx, sel);
      auto d_freq = upload(ctx, freqs);
      const int groups = (sh.H + kMlaHeadGroup - 1) / kMlaHeadGroup;
      const int splits = force_splits > 0
                             ? force_splits
                             : plan.splits_latent(groups, topk, n, 256, /*graph=*/true);
      DeviceBuffer out(std::size_t(n) * sh.H * sh.v * sizeof(bf16));
      DeviceBuffer scratch(mla_split_scratch_bytes(n, sh.H, sh.R, splits));
      MlaAttnParams p;
      p.q = q.as<bf16>();
      p.kv_b = kv_b.as<bf16>();
      p.tiles = d_tiles.as<AttnTile>();
      p.num_tiles = n;
      p.block_table = d_table.as<std::int32_t>();
      p.cache = cache.as<bf16>();
      p.layout = layout;
      p.num_heads = sh.H;
      p.nope = sh.nope;
      p.rope = sh.rope;
      p.v = sh.v;
      p.kv_lora = sh.R;
      p.scale = 1.0f / std::sqrt(static_cast<float>(sh.nope + sh.rope));
      p.rp = MlaRope{d_freq.as<float>(), 1.0f, false};
      p.out = out.as<bf16>();
      if (topk > 0) {
        p.sel = d_sel.as<std::int32_t>();
        p.topk = topk;
      }
      p.T = n;
      p.scratch = scratch.data();
      const double keys = sparse ? topk : context;
      const double bytes = double(n) * keys * (sh.R + sh.rope) * 2;
      auto report = [&](const char *kernel, int sp, double sec) {
        std::printf("| %s | %d | %d | %d | %d | %s | %.1f | %.0f | %.0f%% |\n", model.c_str(),
                    context, n, topk, sp, kernel, sec * 1e6, bytes / sec / 1e9,
                    100.0 * bytes / sec / bw);
        std::fflush(stdout);
      };
      p.num_splits = splits;
      report("split", splits, time_launches(ctx, iters, [&] { launch_mla_attention(s, p); }));
      if (sparse && sh.tail > 0) {
        constexpr int kHi = 32;
        const int Di = sh.tail;
        std::vector<float> qi(std::size_t(n) * kHi * Di), wi(std::size_t(n) * kHi);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (float &v : qi) v = nd(rng);
        for (float &v : wi) v = nd(rng);
        std::vector<DsaToken> toks(n);
        for (int t = 0; t < n; ++t) toks[t] = {context - 1, t * per_seq};
        auto d_qi = upload(ctx, qi), d_wi = upload(ctx, wi), d_toks = upload(ctx, toks);
        DeviceBuffer scores(std::size_t(n) * context * sizeof(float));
        DeviceBuffer isel(std::size_t(n) * topk * sizeof(std::int32_t));
        const int topk_rows = std::min(n, 64);
        DeviceBuffer tk(dsa_topk_scratch_bytes(topk_rows));
        DsaScoreParams dp;
        dp.q = d_qi.as<float>();
        dp.w = d_wi.as<float>();
        dp.w_stride = kHi;
        dp.tokens = d_toks.as<DsaToken>();
        dp.block_table = d_table.as<std::int32_t>();
        dp.cache = cache.as<bf16>();
        dp.layout = layout;
        dp.key_at = sh.R + sh.rope;
        dp.Hi = kHi;
        dp.Di = Di;
        dp.rope = sh.rope;
        dp.rp = p.rp;
        dp.topk = topk;
        dp.T = dp.rows = n;
        dp.scores = scores.as<float>();
        dp.stride = context;
        const double key_bytes = double(n) * context * Di * 2;
        DeviceBuffer flush(std::size_t(256) << 20);
        for (const bool mma : {true, false}) {
          if (!mma && !dsa_fp32) continue;
          dp.mma = mma;
          dp.ctas_per_row =
              dsa_ctas > 0 ? dsa_ctas : dsa_scores_ctas_per_row(dp, context, ctx.num_sms());
          const double sc = time_cold(ctx, iters, flush, [&] { launch_dsa_scores(s, dp); });
          std::printf(
              "| %s | %d | %d | %d | %d | dsa scores %s (bytes floor %.1f us) | %.1f | %.0f | "
              "%.0f%% |\n",
              model.c_str(), context, n, topk, dp.ctas_per_row,
              dsa_scores_uses_mma(dp) ? "mma" : "fp32", key_bytes / bw * 1e6, sc * 1e6,
              key_bytes / sc / 1e9, 100.0 * key_bytes / sc / bw);
        }
        const double tk_sec = time_launches(ctx, iters, [&] {
          launch_dsa_topk(s, dp.scores, dp.stride, dp.tokens, n, 0, n, topk,
                          isel.as<std::int32_t>(), tk.data(), topk_rows);
        });
        std::printf("| %s | %d | %d | %d | - | dsa top-k | %.1f | - | - |\n", model.c_str(),
                    context, n, topk, tk_sec * 1e6);
        std::fflush(stdout);
      }
      if (simple) {
        p.num_splits = 0;
        report("simple", 0,
               time_launches(ctx, std::max(1, iters / 10), [&] { launch_mla_attention(s, p); }));
      }
    }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "cuda_mla_bench: %s\n", e.what());
    return 1;
  }
}
#endif
