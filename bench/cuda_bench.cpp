// CUDA backend benchmark on Llama 3.2 1B / Llama 3.1 8B shapes with pseudo-random bf16
// weights made on the device: batch-1 decode, prefill at 512 and 8192 tokens, and
// aggregate decode at 8..256 concurrent sequences (512-token prompts, 128 new tokens),
// each beside its roofline (measured copy bandwidth and bf16 GEMM rate, given by flags).
//
//   cuda_bench --model 8b [--decode-steps 128] [--verify K] [--bw 4.3e12] [--flops 8.0e14] [--seqs
//   8,32,...]
//     [--gemv-max-m N] [--profile] [--no-graphs] [--fused-max-m N] [--pdl on|off]
//     [--fused-mma 0|1] [--fused-waves N]   (the fused GEMV's kernel and grid, A/B)
//     [--qgemv-mma-min-m N]   (GGUF blocks kept quantized: steps of >= N rows on the integer
//     GEMV's tensor-core kernel; default off)
//     [--qgemv-stream-stages N]   (GGUF blocks kept quantized: the dp4a GEMV streamed through
//     N ring slots a warp in shared memory; 0: its register kernel)
//     [--qgemm-max-m N]   (GGUF blocks kept quantized: steps of 9..N rows on a tensor-core
//     GEMM over the blocks, k_qgemm.h; 0: dequantize + cuBLASLt past 8 rows)
//     [--qgemm-bf16 on|off]   (those steps' K-quants on the dequantizing bf16 GEMM, or
//     dequantized for cuBLASLt)
//     [--max-splits N] [--block-size N] [--make-model DIR]
//   cuda_bench --model 8b --weights m.gguf [--keep-quantized on|off]   (a model file, e.g.
//     keel make-model --shape 8b --dtype q4_k_m --format gguf; GGUF blocks stay quantized)
//   cuda_bench --model 1b|8b --make-gguf FILE [--gguf-dtype q4_k_m|q5_k_m|q4_k|q5_k|q6_k|q8_0|
//     q4_0] [--keep-quantized on|off]   (writes that file first unless it exists, as keel
//     make-model --shape M --dtype D --format gguf --seed 1 does, then benches it)
//   cuda_bench --gemv-bench [--model 1b|8b] [--pdl on|off] [--gemv-waves N]   (linear layers at M
//   1-5, 8:
//     cuBLASLt vs the GEMV kernel vs the fused decode GEMV on CUDA cores and on tensor
//     cores, alone, and as the runner picks 8 back to back)
//   cuda_bench --model 8b --kv-transfer [--tokens 8192]   (KV block save/restore over PCIe)
//   cuda_bench --model deepseek-v3|glm-5 ... [--mla-prefill chunks|simple]   (steps over the MLA
//     split path's 256 rows: its tensor-core kernel in chunks of 256 rows, or the simple kernel)
//   cuda_bench --model qwen3-30b-a3b|qwen3-moe-small|mixtral-8x7b|gpt-oss-20b|gpt-oss-120b
//     [--layers N] [--experts auto|mxfp4|bf16] (auto: MXFP4 for gpt-oss, as released)
//     [--moe-gemv-max N] [--moe-lowbit-gemv-max N] [--moe-grouped on|off]
//     [--moe-lowbit-gemm on|off] (off: low-bit experts dequantized to bf16 for the grouped GEMM)
//     [--moe-gguf-qgemv on|off] (on: GGUF experts' slot GEMVs on the integer-dot GEMV)
//     [--moe-gemm-rows 0|16|32|64] (the grouped GEMM's row tile; 0 picks it by the step)
//     (mixture of experts, make_model's shapes; the roofline counts only the expert weights a step
//     reads: k of E per token, the expected distinct experts of n tokens)
//   cuda_bench --model glm-5 --layers N [--context 131072] [--attention both|dsa|dense]
//     [--decode-steps 16] [--profile] [--dsa-mma on|off]   (GLM-5's real dims, DSA on the latent
//     cache: batch-1 decode steps at position --context over a latent cache filled with random
//     values (no prefill), with the indexer's top index_topk (2048) and with index_topk raised past
//     the context (dense attention, the indexer projections still run); ms a step each and
//     their ratio. Without --context, the usual prefill / decode table.)
#include <cstdio>

#if !defined(KEEL_WITH_CUDA)
int main() {
  std::puts("cuda_bench: built without CUDA");
  return 0;
}
#else
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_args.h"
#include "core/error.h"
#include "core/half.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/k_decode_fused.h"
#include "exec/cuda/k_fill.h"
#include "exec/cuda/k_gemv.h"
#include "formats/make_model.h"
#include "formats/model_weights.h"

namespace {
using namespace keel;
using Clock = std::chrono::steady_clock;

ModelConfig llama_config(const std::string &name) {
  ModelConfig c;
  c.arch_name = "llama";
  c.vocab_size = 128256;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 131072;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position = 8192;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  if (name == "1b") {  // Llama 3.2 1B
    c.hidden_size = 2048;
    c.intermediate_size = 8192;
    c.num_layers = 16;
    c.head_dim = 64;
    c.tie_word_embeddings = true;
    c.rope_scaling.factor = 32.0;
  } else if (name == "8b") {  // Llama 3.1 8B
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_layers = 32;
    c.head_dim = 128;
    c.rope_scaling.factor = 8.0;
  } else {
    throw Error(ErrorCode::kInvalidArgument, "--model: 1b or 8b");
  }
  return c;
}

// --gguf-dtype: keel make-model's GGUF dtypes (q4_k_m / q5_k_m: llama.cpp's mixes).
MakeModelOptions gguf_make_options(const std::string &model, const std::string &dtype) {
  MakeModelOptions mo;
  mo.shape = model;
  mo.gguf = true;
  mo.seed = 1;
  mo.k_quant_mix = dtype == "q4_k_m" || dtype == "q5_k_m";
  if (dtype == "q4_k" || dtype == "q4_k_m")
    mo.dtype = DType::kQ4_K;
  else if (dtype == "q5_k" || dtype == "q5_k_m")
    mo.dtype = DType::kQ5_K;
  else if (dtype == "q6_k")
    mo.dtype = DType::kQ6_K;
  else if (dtype == "q8_0")
    mo.dtype = DType::kQ8_0;
  else if (dtype == "q4_0")
    mo.dtype = DType::kQ4_0;
  else
    throw Error(ErrorCode::kInvalidArgument,
                "--gguf-dtype: q4_k_m, q5_k_m, q4_k, q5_k, q6_k, q8_0 or q4_0");
  return mo;
}

// The mixture-of-experts shapes of make_model (random bf16 weights on the device); also
// --model glm-4.5-air (with --layers N: the whole model is 212 GB in bf16), --model
// deepseek-v3 (MLA; with --layers N: 671B).
// --model gpt-oss-20b|gpt-oss-120b: the experts in MXFP4 as released (random codes made on
// the device; --experts bf16 for the bf16 form, which for 120b does not fit one GPU).
bool gpt_oss_model(const std::string &name) {
  return name == "gpt-oss-20b" || name == "gpt-oss-120b";
}
bool moe_model(const std::string &name) {
  return name == "qwen3-30b-a3b" || name == "qwen3-moe-small" || name == "mixtral-8x7b" ||
         name == "glm-4.5-air" || name == "deepseek-v3" || name == "glm-5" || gpt_oss_model(name);
}
MakeModelOptions moe_make_options(const std::string &name, int layers) {
  MakeModelOptions mo;
  mo.arch = name == "mixtral-8x7b"  ? "mixtral"
            : name == "glm-4.5-air" ? "glm4_moe"
            : name == "deepseek-v3" ? "deepseek_v3"
            : name == "glm-5"       ? "glm_moe_dsa"
            : gpt_oss_model(name)   ? "gpt_oss"
                                    : "qwen3_moe";
  mo.shape = name == "qwen3-moe-small" ? "small" : name;
  if (layers > 0) mo.layers = layers;
  return mo;
}

// Bytes of all the experts' weights (bf16, or MXFP4's 17 bytes per 32) of a MoE model; 0 for
// a dense one.
double expert_bytes(const ModelConfig &c, bool mxfp4) {
  if (!c.moe) return 0;
  double sparse = 0;
  for (std::int64_t l = 0; l < c.num_layers; ++l) sparse += c.moe->sparse(l) ? 1 : 0;
  return sparse * c.moe->num_experts * 3.0 * c.hidden_size * c.moe->expert_intermediate *
         (mxfp4 ? 17.0 / 32.0 : 2.0);
}
// The expected fraction of a layer's experts that n tokens routed uniformly at random read.
double experts_read(const ModelConfig &c, int n) {
  if (!c.moe) return 1;
  const double miss = 1.0 - double(c.moe->top_k) / double(c.moe->num_experts);
  return 1.0 - std::pow(miss, n);
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Rates {
  double bw, flops;
};

// Per-token matmul FLOPs of the linear layers (LM head for one row) plus attention
// over `ctx` keys.
double flops_per_token(const ModelConfig &c, double ctx, bool lm_head) {
  const double H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  double attn = 2.0 * (H * (c.num_heads + 2 * c.num_kv_heads) * hd + c.num_heads * hd * H) +
                4.0 * c.num_heads * hd * ctx;
  if (c.mla) {  // the absorbed form: projections, W_kb q, scores and sums over the latent, W_vb
    const MlaConfig &m = *c.mla;
    const double nh = c.num_heads, R = m.kv_lora_rank, rope = m.qk_rope_head_dim;
    const double q = m.q_lora_rank > 0 ? H * m.q_lora_rank + m.q_lora_rank * nh * m.qk_head_dim()
                                       : H * nh * m.qk_head_dim();
    attn = 2.0 * (q + H * (R + rope) + nh * m.v_head_dim * H) +
           2.0 * nh * (m.qk_nope_head_dim * R + ctx * (2 * R + rope) + R * m.v_head_dim);
  }
  double total = 0;
  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    const bool sparse = c.moe && c.moe->sparse(l);
    // A sparse layer: the router and top_k experts of expert_intermediate.
    total += attn + (sparse ? 2.0 * (c.moe->top_k * 3.0 * H * c.moe->expert_intermediate +
                                     H * c.moe->num_experts)
                            : 2.0 * 3 * H * I);
  }
  return total + (lm_head ? 2.0 * H * c.vocab_size : 0.0);
}
double kv_bytes_per_token(const ModelConfig &c) {
  return 2.0 * c.num_layers * kv_values_per_token_layer(c);  // bf16 (MLA: the latent row)
}

class Bench {
 public:
  // Random weights made on the device, or (weights non-empty) a model directory/file.
  Bench(cuda::CudaContext &ctx, const ModelConfig &cfg, const cuda::CudaRunnerOptions &o,
        const std::string &weights)
      : cfg_(cfg),
        runner_(weights.empty()
                    ? std::make_unique<cuda::CudaModelRunner>(ctx, cfg, std::uint64_t{1234}, o)
                    : cuda::CudaModelRunner::open(weights, ctx, o)),
        bs_(o.block_size) {}

  // Gives sequence 0 blocks for `len0` positions and sequences 1..n-1 for `len` each.
  void assign_blocks(int n, int len0, int len) {
    blocks_.assign(n, {});
    int next = 0;
    for (int s = 0; s < n; ++s)
      for (int i = 0; i < ((s == 0 ? len0 : len) + bs_ - 1) / bs_; ++i)
        blocks_[s].push_back(next++);
    if (next > runner_->kv().num_blocks())
      throw Error(ErrorCode::kResourceExhausted, "bench: KV cache too small");
  }
  static int blocks_needed(int n, int len0, int len, int bs) {
    return (len0 + bs - 1) / bs + (n - 1) * ((len + bs - 1) / bs);
  }

  // Prefills sequences [first, first + n) with `len` tokens each, chunked to max_tokens
  // per pass. Returns seconds.
  double prefill(int first, int n, int len, int max_tokens) {
    const auto t0 = Clock::now();
    int s = first;
    std::vector<TokenId> next;
    while (s < first + n) {
      ForwardBatch b;
      while (s < first + n && b.total_tokens() + len <= std::max(max_tokens, len)) {
        add(b, s, 0, len, SequenceSlice::Logits::kLast);
        ++s;
      }
      runner_->forward_greedy(b, next);
      for (std::size_t i = 0; i < next.size(); ++i) last_[s - next.size() + i] = next[i];
    }
    return seconds(t0, Clock::now());
  }

  // Decodes `steps` tokens for sequences [0, n) from position `pos`. Returns seconds.
  double decode(int n, int pos, int steps) {
    std::vector<TokenId> next;
    const auto t0 = Clock::now();
    for (int step = 0; step < steps; ++step) {
      ForwardBatch b;
      for (int s = 0; s < n; ++s) {
        b.tokens.push_back(last_[s]);
        SequenceSlice q;
        q.token_offset = s;
        q.num_tokens = 1;
        q.start_pos = pos + step;
        q.block_offset = static_cast<int>(b.block_table.size());
        q.num_blocks = (pos + step + 1 + bs_ - 1) / bs_;
        b.block_table.insert(b.block_table.end(), blocks_[s].begin(),
                             blocks_[s].begin() + q.num_blocks);
        b.seqs.push_back(q);
      }
      runner_->forward_greedy(b, next);
      for (int s = 0; s < n; ++s) last_[s] = next[s];
    }
    return seconds(t0, Clock::now());
  }

  // Speculative verify steps (issue 30): `steps` forwards of 1 + k tokens for each of the
  // sequences [0, n) (the last token, then k drafts), every row's logits sampled (kTail),
  // advancing one position a step (as if no draft were accepted; the timing is the
  // same). Returns seconds.
  double verify(int n, int pos, int steps, int k) {
    std::vector<TokenId> next;
    const auto t0 = Clock::now();
    for (int step = 0; step < steps; ++step) {
      ForwardBatch b;
      for (int s = 0; s < n; ++s) {
        SequenceSlice q;
        q.token_offset = b.total_tokens();
        q.num_tokens = 1 + k;
        q.start_pos = pos + step;
        q.block_offset = static_cast<int>(b.block_table.size());
        q.num_blocks = (pos + step + 1 + k + bs_ - 1) / bs_;
        q.logits = SequenceSlice::Logits::kTail;
        q.num_logits = 1 + k;
        b.tokens.push_back(last_[s]);
        for (int j = 0; j < k; ++j) b.tokens.push_back(prompt_[(pos + step + j) % prompt_.size()]);
        b.block_table.insert(b.block_table.end(), blocks_[s].begin(),
                             blocks_[s].begin() + q.num_blocks);
        b.seqs.push_back(q);
      }
      runner_->forward_greedy(b, next);
      for (int s = 0; s < n; ++s) last_[s] = next[std::size_t(s) * (1 + k)];
    }
    return seconds(t0, Clock::now());
  }

  void init_tokens(int n) {
    last_.assign(n, 0);
    prompt_.resize(8192);
    for (std::size_t i = 0; i < prompt_.size(); ++i)
      prompt_[i] = static_cast<TokenId>((i * 7919 + 13) % cfg_.vocab_size);
  }
  cuda::CudaModelRunner &runner() { return *runner_; }

 private:
  void add(ForwardBatch &b, int s, int from, int n, SequenceSlice::Logits logits) {
    SequenceSlice q;
    q.token_offset = b.total_tokens();
    q.num_tokens = n;
    q.start_pos = from;
    q.block_offset = static_cast<int>(b.block_table.size());
    q.num_blocks = (from + n + bs_ - 1) / bs_;
    q.logits = logits;
    b.block_table.insert(b.block_table.end(), blocks_[s].begin(),
                         blocks_[s].begin() + q.num_blocks);
    for (int i = 0; i < n; ++i) b.tokens.push_back(prompt_[(from + i + 31 * s) % prompt_.size()]);
    b.seqs.push_back(q);
  }

  ModelConfig cfg_;
  std::unique_ptr<cuda::CudaModelRunner> runner_;
  int bs_;
  std::vector<std::vector<std::int32_t> > blocks_;
  std::vector<TokenId> last_, prompt_;
};

// Host wall time of batched KV block transfers (begin_* .. transfer_done polled), the time
// the engine waits for a restore, for `tokens` tokens of KV in blocks of 16, against one
// plain pinned cudaMemcpyAsync of the same bytes (the PCIe ceiling).
// bf16 weights [N, K] in enough copies (at least 9, over 400 MB) that launches rotating
// over them read from HBM, not the 50 MB L2 (gemv_bench).
struct RotatingWeights {
  RotatingWeights(const cuda::StreamRef &s, std::int64_t N, std::int64_t K)
      : bytes(std::size_t(N) * K * 2),
        copies(static_cast<int>(std::max<std::size_t>(9, (400u << 20) / bytes + 1))),
        w(bytes * copies) {
    cuda::launch_fill_uniform(s, w.as<cuda::bf16>(), std::int64_t(bytes / 2) * copies, 7, -0.05f,
                              0.05f);
  }
  const unsigned char *at(int r) const { return w.as<unsigned char>() + (r % copies) * bytes; }
  std::size_t bytes;
  int copies;
  cuda::DeviceBuffer w;
};

// Median over 30 timed rounds (3 warm-up) of `per` launches back to back on `s`, in us a
// launch; launch(i) gets the running launch index.
template <class Launch>
double median_launch_us(const cuda::StreamRef &s, Launch &&launch, int per) {
  std::vector<double> t;
  cuda::Event a(true), b(true);
  for (int r = 0; r < 33; ++r) {
    a.record(s);
    for (int i = 0; i < per; ++i) launch(r * per + i);
    b.record(s);
    b.wait(std::chrono::seconds(30), "gemv bench");
    if (r >= 3) t.push_back(cuda::Event::elapsed_ms(a, b) * 1e3 / per);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Linear layers at M = 1..5, 8 (decode with few sequences, verify steps): cuBLASLt against
// the GEMV kernel (k_gemv.h) and the fused decode GEMV (k_decode_fused.h, plain bf16 input,
// its CUDA-core and its tensor-core kernel), the model's
// shapes, bytes/s against the copy bandwidth. Weights rotate over enough copies that every
// launch reads from HBM, not the 50 MB L2. "fused x8": 8 launches back to back (each on
// the next weight copy), time per launch: with PDL each overlaps its predecessor's tail.
int gemv_bench(const Rates &rates, const ModelConfig &cfg, bool pdl, int waves) {
  cuda::CudaContext ctx;
  const cuda::StreamRef s = ctx.compute();
  // The fused GEMV's shared memory per block: the device's, within the kernel's own cap.
  const std::size_t smem = std::min<std::size_t>(ctx.features().smem_per_block, 200 << 10);
  struct Shape {
    std::string name;
    std::int64_t N, K;
    bool f32;
  };
  const std::int64_t H = cfg.hidden_size, I = cfg.intermediate_size,
                     q = std::int64_t(cfg.num_heads) * cfg.head_dim,
                     qkv = q + 2 * std::int64_t(cfg.num_kv_heads) * cfg.head_dim;
  auto dims = [](std::int64_t n, std::int64_t k) {
    return std::to_string(n) + "x" + std::to_string(k);
  };
  const Shape shapes[] = {{"o_proj " + dims(H, q), H, q, false},
                          {"qkv " + dims(qkv, H), qkv, H, false},
                          {"gate_up " + dims(2 * I, H), 2 * I, H, false},
                          {"down " + dims(H, I), H, I, false},
                          {"lm_head " + dims(cfg.vocab_size, H) + " f32", cfg.vocab_size, H, true}};
  std::printf(
      "# linear layers at small M on %s: cuBLASLt vs GEMV kernel vs fused GEMV (median of 30 "
      "us; TB/s of weights), PDL %s\n",
      ctx.device_name().c_str(), pdl ? "on" : "off");
  std::printf("| %-30s | %2s | %9s | %5s | %9s | %5s | %9s | %5s | %9s | %5s | %9s | %5s | %9s |\n",
              "shape", "M", "cuBLAS", "TB/s", "GEMV", "TB/s", "fused core", "TB/s", "fused mma",
              "TB/s", "fused x8", "TB/s", "max rel d");
  std::printf(
      "|--------------------------------|----|-----------|-------|-----------|-------|-----------|"
      "-------|-----------|-------|-----------|-------|-----------|\n");
  for (const Shape &sh : shapes) {
    const RotatingWeights w(s, sh.N, sh.K);
    const std::size_t wbytes = w.bytes;
    cuda::DeviceBuffer x(std::size_t(8) * sh.K * 2);
    cuda::DeviceBuffer y1(std::size_t(8) * sh.N * 4), y2(std::size_t(8) * sh.N * 4),
        y3(std::size_t(8) * sh.N * 4);
    cuda::launch_fill_uniform(s, x.as<cuda::bf16>(), 8 * sh.K, 8, -1.0f, 1.0f);
    const cuda::GemmType out = sh.f32 ? cuda::GemmType::kF32 : cuda::GemmType::kBF16;
    for (int M : {1, 2, 3, 4, 5, 8}) {
      cuda::Gemm lt(ctx), gv(ctx);
      gv.set_gemv_max_m(M);
      auto copy_at = [&](int r) { return w.at(r); };
      // mma: the fused kernel's tensor-core variant (-1 as the runner picks, 0 / 1 forced).
      auto fused = [&](int r, void *y, int mma = -1) {
        cuda::FusedGemvParams p;
        p.w = reinterpret_cast<const cuda::bf16 *>(copy_at(r));
        p.N = sh.N;
        p.K = sh.K;
        p.M = M;
        p.x = x.as<cuda::bf16>();
        p.out = sh.f32 ? cuda::GemvOut::kF32 : cuda::GemvOut::kBf16;
        p.y = y;
        p.pdl = pdl && ctx.features().programmatic_launch;
        p.mma = mma;
        p.max_waves = waves;
        cuda::launch_fused_gemv(s, p, ctx.num_sms());
      };
      auto time = [&](auto &&launch, int per) { return median_launch_us(s, launch, per); };
      auto run_gemm = [&](cuda::Gemm &g, void *y, int r) {
        g.run(s, cuda::GemmType::kBF16, out, x.data(), copy_at(r), y, M, sh.N, sh.K);
      };
      // The timed loops end on copy (32 * per + per - 1) % copies: rerun all three on copy 0.
      const double us_lt = time([&](int r) { run_gemm(lt, y1.data(), r); }, 1);
      const double us_gv = time([&](int r) { run_gemm(gv, y2.data(), r); }, 1);
      const bool core_ok = M <= cuda::kFusedGemvCoreMaxM &&
                           cuda::fused_gemv_staged_bytes(M, sh.K, cuda::GemvIn::kBf16, 0) <= smem,
                 mma_ok = cuda::fused_gemv_uses_mma(M, sh.K, 1),
                 auto_ok = cuda::fused_gemv_supported(M, sh.K, smem, cuda::GemvIn::kBf16);
      const double us_fc = core_ok ? time([&](int r) { fused(r, y3.data(), 0); }, 1) : NAN;
      const double us_fm = mma_ok ? time([&](int r) { fused(r, y3.data(), 1); }, 1) : NAN;
      const double us_f8 = auto_ok ? time([&](int r) { fused(r, y3.data()); }, 8) : NAN;
      run_gemm(lt, y1.data(), 0);
      run_gemm(gv, y2.data(), 0);
      if (auto_ok) fused(0, y3.data());
      const std::size_t n = std::size_t(M) * sh.N;
      auto fetch = [&](cuda::DeviceBuffer &y) {
        std::vector<float> h(n);
        KEEL_CUDA_CHECK(cudaStreamSynchronize(s.get("bench sync")));
        if (sh.f32) {
          KEEL_CUDA_CHECK(cudaMemcpy(h.data(), y.data(), n * 4, cudaMemcpyDeviceToHost));
        } else {
          std::vector<std::uint16_t> a(n);
          KEEL_CUDA_CHECK(cudaMemcpy(a.data(), y.data(), n * 2, cudaMemcpyDeviceToHost));
          for (std::size_t i = 0; i < n; ++i) h[i] = bf16_to_f32(a[i]);
        }
        return h;
      };
      const auto h1 = fetch(y1), h2 = fetch(y2), h3 = fetch(y3);
      double num = 0, den = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double d = std::max(std::abs(double(h1[i]) - h2[i]),
                                  auto_ok ? std::abs(double(h1[i]) - h3[i]) : 0.0);
        num = std::max(num, d);
        den = std::max(den, std::abs(double(h1[i])));
      }
      auto tbs = [&](double us) { return wbytes / (us * 1e-6) / 1e12; };
      std::printf(
          "| %-30s | %2d | %9.1f | %5.2f | %9.1f | %5.2f | %9.1f | %5.2f | %9.1f | %5.2f | "
          "%9.1f | %5.2f | %9.2e |\n",
          sh.name.c_str(), M, us_lt, tbs(us_lt), us_gv, tbs(us_gv), us_fc, tbs(us_fc), us_fm,
          tbs(us_fm), us_f8, tbs(us_f8), num / std::max(den, 1e-30));
      std::fflush(stdout);
    }
  }
  // The fused GEMV as the decode path calls it (cuda_runner_fused.cpp): qkv and gate_up
  // with the RMSNorm prologue (staged), gate_up with the SwiGLU epilogue, o_proj and down
  // adding into the f32 residual, the LM head on selected rows; CUDA cores vs tensor cores
  // (its default grid and 4 waves).
  std::printf(
      "\n# fused GEMV as the decode path calls it (median us; TB/s of weights)\n"
      "| %-30s | %2s | %9s | %5s | %9s | %5s | %9s | %5s |\n"
      "|--------------------------------|----|-----------|-------|-----------|-------|-----------|"
      "-------|\n",
      "call", "M", "core", "TB/s", "mma", "TB/s", "mma 4 w", "TB/s");
  struct Call {
    std::string name;
    std::int64_t N, K;
    cuda::GemvIn in;
    cuda::GemvOut out;
  };
  using GI = cuda::GemvIn;
  using GO = cuda::GemvOut;
  const Call calls[] = {{"qkv norm->bf16", qkv, H, GI::kRmsNorm, GO::kBf16},
                        {"o_proj ->+residual", H, q, GI::kBf16, GO::kAddResidual},
                        {"gate_up norm->swiglu", 2 * I, H, GI::kRmsNorm, GO::kSwiglu},
                        {"down ->+residual", H, I, GI::kBf16, GO::kAddResidual},
                        {"lm_head norm->f32 (rows)", cfg.vocab_size, H, GI::kRmsNorm, GO::kF32}};
  const std::int64_t Kmax = std::max({H, q, I});
  cuda::DeviceBuffer residual(std::size_t(8) * Kmax * 4), norm_w(std::size_t(Kmax) * 2),
      xin(std::size_t(8) * Kmax * 2), rows_d(8 * sizeof(std::int32_t));
  cuda::launch_fill_uniform(s, xin.as<cuda::bf16>(), 8 * Kmax, 9, -1.0f, 1.0f);
  cuda::launch_fill_uniform(s, norm_w.as<cuda::bf16>(), Kmax, 10, 0.5f, 1.5f);
  {
    std::vector<float> r(std::size_t(8) * Kmax);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    for (auto &v : r) v = d(rng);
    const std::int32_t rows_h[8] = {7, 6, 5, 4, 3, 2, 1, 0};
    KEEL_CUDA_CHECK(cudaMemcpy(residual.data(), r.data(), r.size() * 4, cudaMemcpyHostToDevice));
    KEEL_CUDA_CHECK(cudaMemcpy(rows_d.data(), rows_h, sizeof rows_h, cudaMemcpyHostToDevice));
  }
  for (const Call &c : calls) {
    const RotatingWeights w(s, c.N, c.K);
    cuda::DeviceBuffer y(std::size_t(8) * c.N * 4);
    for (int M : {1, 2, 4, 8}) {
      auto launch = [&](int r, int mma, int waves) {
        cuda::FusedGemvParams p;
        p.w = reinterpret_cast<const cuda::bf16 *>(w.at(r));
        p.N = c.N;
        p.K = c.K;
        p.M = M;
        p.in = c.in;
        p.x = xin.as<cuda::bf16>();
        p.residual = residual.as<float>();
        p.rows = c.out == GO::kF32 ? rows_d.as<std::int32_t>() : nullptr;
        p.norm_weight = norm_w.as<cuda::bf16>();
        p.out = c.out;
        // The residual add writes its input rows' buffer: a separate one here.
        p.y = y.data();
        p.pdl = pdl && ctx.features().programmatic_launch;
        p.mma = mma;
        p.max_waves = waves;
        cuda::launch_fused_gemv(s, p, ctx.num_sms());
      };
      auto time = [&](int mma, int waves) {
        return median_launch_us(
            s, [&](int r) { launch(r, mma, waves); }, 1);
      };
      const bool core_ok =
          M <= cuda::kFusedGemvCoreMaxM && cuda::fused_gemv_staged_bytes(M, c.K, c.in, 0) <= smem;
      const bool mma_ok = cuda::fused_gemv_uses_mma(M, c.K, 1) &&
                          cuda::fused_gemv_staged_bytes(M, c.K, c.in, 1) <= smem;
      const double us_c = core_ok ? time(0, 0) : NAN;
      const double us_m = mma_ok ? time(1, 0) : NAN;
      const double us_m4 = mma_ok ? time(1, 4) : NAN;
      auto tbs = [&](double us) { return w.bytes / (us * 1e-6) / 1e12; };
      std::printf("| %-30s | %2d | %9.1f | %5.2f | %9.1f | %5.2f | %9.1f | %5.2f |\n",
                  c.name.c_str(), M, us_c, tbs(us_c), us_m, tbs(us_m), us_m4, tbs(us_m4));
      std::fflush(stdout);
    }
  }
  std::printf("ceiling: %.2f TB/s copy bandwidth (--bw)\n", rates.bw / 1e12);
  return 0;
}

int kv_transfer_bench(const ModelConfig &cfg, const std::string &model, int tokens) {
  cuda::CudaContext ctx;
  cuda::KvLayout l;
  l.num_layers = cfg.num_layers;
  l.block_size = 16;
  l.num_kv_heads = cfg.num_kv_heads;
  l.head_dim = cfg.head_dim;
  const int n = (tokens + 15) / 16;
  cuda::CudaKvStore kv(ctx, l, 2 * n);
  const std::size_t bytes = n * kv.block_bytes();
  auto host = kv.allocate_host(bytes);
  for (std::size_t i = 0; i < bytes; i += 4096) host[i] = static_cast<std::byte>(i >> 12);
  std::printf("# KV transfer, %s shape on %s: %d tokens = %d blocks of %.2f MiB = %.3f GiB\n",
              model.c_str(), ctx.device_name().c_str(), tokens, n, kv.block_bytes() / 1048576.0,
              bytes / 1073741824.0);
  std::printf("| %-44s | %9s | %9s | %10s |\n", "transfer", "ms", "GB/s", "host ms");
  std::printf(
      "|----------------------------------------------|-----------|-----------|------------|\n");
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto report = [&](const std::string &what, std::vector<double> t, std::vector<double> h) {
    const double ms = median(t) * 1e3;
    std::printf("| %-44s | %9.2f | %9.1f | %10.3f |\n", what.c_str(), ms, bytes / (ms * 1e-3) / 1e9,
                median(h) * 1e3);
    std::fflush(stdout);
  };
  // Ceiling: one pinned copy of the same size each way.
  cuda::DeviceBuffer dev(bytes);
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<double> t, h;
    for (int r = 0; r < 6; ++r) {
      cuda::Event done;
      const auto t0 = Clock::now();
      KEEL_CUDA_CHECK(cudaMemcpyAsync(dir ? host.get() : dev.data(), dir ? dev.data() : host.get(),
                                      bytes, dir ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                      ctx.copy_h2d().get("cudaMemcpyAsync")));
      done.record(ctx.copy_h2d());
      h.push_back(seconds(t0, Clock::now()));
      done.wait(std::chrono::seconds(30), "bench copy");
      t.push_back(seconds(t0, Clock::now()));
    }
    report(std::string("one cudaMemcpyAsync ") + (dir ? "D2H" : "H2D") + " (ceiling)", t, h);
  }
  std::vector<std::int32_t> contiguous(n), scattered(n);
  std::iota(contiguous.begin(), contiguous.end(), 0);
  for (int i = 0; i < n; ++i) scattered[i] = (i * 2 + (i * 7919) % 2) % (2 * n);  // every other
  std::shuffle(scattered.begin(), scattered.end(), std::mt19937(7));
  using M = cuda::CudaKvStore::CopyMethod;
  for (M m : {M::kPerRun, M::kBatch}) {
    kv.set_copy_method(m);
    for (int pattern = 0; pattern < 2; ++pattern) {
      const auto &ids = pattern ? scattered : contiguous;
      for (int dir = 0; dir < 2; ++dir) {
        std::vector<double> t, h;
        for (int r = 0; r < 6; ++r) {
          const auto t0 = Clock::now();
          const auto id = dir ? kv.begin_save(ids, {host.get(), bytes})
                              : kv.begin_load(ids, {host.get(), bytes});
          h.push_back(seconds(t0, Clock::now()));
          while (!kv.transfer_done(id)) {
          }
          t.push_back(seconds(t0, Clock::now()));
        }
        report(std::string(dir ? "save " : "load ") +
                   (pattern ? "shuffled blocks" : "consecutive blocks") +
                   (m == M::kPerRun ? ", memcpy per run" : ", one batch memcpy"),
               t, h);
      }
    }
  }
  // A load and a save at once (different blocks): both directions of the link.
  {
    std::vector<double> t, h;
    auto host2 = kv.allocate_host(bytes);
    std::vector<std::int32_t> upper(n);
    std::iota(upper.begin(), upper.end(), n);
    kv.set_copy_method(M::kPerRun);
    for (int r = 0; r < 6; ++r) {
      const auto t0 = Clock::now();
      const auto a = kv.begin_load(contiguous, {host.get(), bytes});
      const auto b = kv.begin_save(upper, {host2.get(), bytes});
      h.push_back(seconds(t0, Clock::now()));
      while (!kv.transfer_done(a) || !kv.transfer_done(b)) {
      }
      t.push_back(seconds(t0, Clock::now()) / 2);  // per direction-equivalent of `bytes`
    }
    report("load + save back to back (time / 2)", t, h);
  }
  return 0;
}

// Batch-1 decode at position `context` of GLM-5 (DSA) over a latent cache filled with random
// values: the KV pool holds one sequence of context + steps positions; `dense` raises
// index_topk past the context so every query reads all of it. Returns ms a step.
double long_context_decode(cuda::CudaContext &ctx, ModelConfig cfg, cuda::CudaRunnerOptions o,
                           int context, int steps, bool dense, bool profile) {
  if (!cfg.mla || !cfg.mla->dsa())
    throw Error(ErrorCode::kInvalidArgument, "--context: a DSA model (--model glm-5)");
  const std::int64_t topk = cfg.mla->index_topk;
  if (dense) cfg.mla->index_topk = context + steps + 64;
  const int len = context + steps + 8;
  o.max_model_len = len + 16;
  o.max_batch_tokens = 2048;
  o.max_seqs = 8;
  o.max_logits_rows = 8;
  o.num_kv_blocks = Bench::blocks_needed(1, len, len, o.block_size);
  const auto t0 = Clock::now();
  Bench bench(ctx, cfg, o, "");
  cuda::CudaKvStore &kv = bench.runner().kv_store();
  cuda::launch_fill_uniform(ctx.compute(), kv.data(),
                            static_cast<std::int64_t>(kv.layout().block_elems()) * kv.num_blocks(),
                            99, -1.0f, 1.0f);
  bench.init_tokens(1);
  bench.assign_blocks(1, len, len);
  bench.decode(1, context, 2);  // warm-up, graph capture
  bench.runner().take_profile();
  const double t = bench.decode(1, context + 2, steps);
  const double ms = t / steps * 1e3;
  std::printf(
      "| glm-5 | decode 1 seq at %d, %s | %.3f ms a step | set up %.1f s |\n", context,
      dense ? "dense (index_topk past the context)" : ("DSA top " + std::to_string(topk)).c_str(),
      ms, seconds(t0, Clock::now()));
  if (profile) {
    const auto p = bench.runner().take_profile();
    std::printf("|       |   per step: gemm %.3f, attention + indexer %.3f, other %.3f ms |\n",
                p[0] / steps, p[1] / steps, p[2] / steps);
  }
  std::fflush(stdout);
  return ms;
}

int run(int argc, char **argv) {
  std::string model = "8b";
  int steps = 128;
  int verify_k = 0;  // --verify K: also time verify steps of 1 + K tokens a sequence
  Rates rates{4.3e12, 8.0e14};
  std::vector<int> seqs = {8, 32, 64, 128, 256};
  bool long_prefill = true;
  bool profile = false;  // per-phase device time (events between kernels; slows the step)
  bool kv_transfer = false;
  bool graphs = true;  // CUDA graphs for decode steps
  int gemv_max_m = 1;  // linear layers with <= this many rows on the GEMV kernel
  int fused_max_m = cuda::CudaRunnerOptions{}.kernels.fused_decode_max_m;  // fused decode kernels
  int fused_mma = -1, fused_waves = 0;  // --fused-mma 0|1, --fused-waves N: kernel variants
  int qgemv_mma_min_m = cuda::CudaRunnerOptions{}.kernels.qgemv_mma_min_m;  // --qgemv-mma-min-m N
  int qgemm_max_m = cuda::CudaRunnerOptions{}.kernels.qgemm_max_m;          // --qgemm-max-m N
  bool qgemm_bf16 = cuda::CudaRunnerOptions{}.kernels.qgemm_bf16;           // --qgemm-bf16
  int qgemv_stream_stages = cuda::CudaRunnerOptions{}.kernels.qgemv_stream_stages;
  bool dsa_mma = cuda::CudaRunnerOptions{}.kernels.dsa_scores_mma;         // --dsa-mma on|off
  bool mla_chunks = cuda::CudaRunnerOptions{}.kernels.mla_prefill_chunks;  // --mla-prefill
  int split_cap = 0;         // attention split-K cap (0: auto)
  bool pdl = true;           // programmatic dependent launch of the fused kernels
  bool gemv = false;         // --gemv-bench: cuBLASLt vs GEMV kernel alone
  int gemv_waves = 0;        // --gemv-waves N: the fused GEMV's grid cap (0: its default)
  int block_size = 16;       // tokens per KV block
  std::string model_dir;     // --make-model DIR: weights written by keel make-model (bf16)
  std::string weights_path;  // --weights FILE|DIR: an existing model of --model's shape
  std::string gguf_path;     // --make-gguf FILE: --model's shape as GGUF, written if absent
  std::string gguf_dtype = "q4_k_m";  // --gguf-dtype: its block format
  bool keep_quantized = true;  // --keep-quantized on|off: GGUF blocks stay quantized on device
  int transfer_tokens = 8192;
  int layers = 0;  // --layers N: a MoE shape with fewer layers
  int moe_gemv_max = cuda::CudaRunnerOptions{}.kernels.moe_gemv_max_tokens;
  int moe_lowbit_gemv_max = cuda::CudaRunnerOptions{}.kernels.moe_lowbit_gemv_max_tokens;
  bool moe_grouped = true;         // --moe-grouped on|off: the experts' grouped GEMM for prefill
  int context = 0;                 // --context N: GLM-5's long-context decode (DSA vs dense)
  std::string attention = "both";  // --attention both|dsa|dense (with --context)
  bool moe_lowbit_gemm = true;     // --moe-lowbit-gemm on|off: low-bit tiles decoded in the GEMM
  bool moe_gguf_qgemv = cuda::CudaRunnerOptions{}.kernels.moe_gguf_qgemv;  // --moe-gguf-qgemv
  int moe_gemm_rows = 0;             // --moe-gemm-rows 0|16|32|64: the grouped GEMM's row tile
  std::string experts_fmt = "auto";  // --experts auto|mxfp4|bf16: routed experts, random weights
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(ErrorCode::kInvalidArgument, a + " needs a value");
      return argv[++i];
    };
    // The flag's value, which must be `first` or `second`.
    auto choice = [&](const char *first, const char *second) -> std::string {
      std::string v = val();
      if (v != first && v != second)
        throw Error(ErrorCode::kInvalidArgument, a + ": " + first + " or " + second);
      return v;
    };
    if (a == "--model")
      model = val();
    else if (a == "--decode-steps")
      steps = std::stoi(val());
    else if (a == "--verify")
      verify_k = std::stoi(val());
    else if (a == "--bw")
      rates.bw = std::stod(val());
    else if (a == "--flops")
      rates.flops = std::stod(val());
    else if (a == "--seqs")
      seqs = bench::int_list(val());
    else if (a == "--no-long-prefill")
      long_prefill = false;
    else if (a == "--profile")
      profile = true;
    else if (a == "--no-graphs")
      graphs = false;
    else if (a == "--weights")
      weights_path = val();
    else if (a == "--make-gguf")
      gguf_path = val();
    else if (a == "--gguf-dtype")
      gguf_dtype = val();
    else if (a == "--keep-quantized")
      keep_quantized = choice("on", "off") == "on";
    else if (a == "--make-model")
      model_dir = val();
    else if (a == "--block-size")
      block_size = std::stoi(val());
    else if (a == "--gemv-max-m") {
      gemv_max_m = std::stoi(val());
    } else if (a == "--fused-max-m") {
      fused_max_m = std::stoi(val());
    } else if (a == "--fused-mma") {
      fused_mma = std::stoi(val());
    } else if (a == "--fused-waves") {
      fused_waves = std::stoi(val());
    } else if (a == "--qgemv-mma-min-m") {
      qgemv_mma_min_m = std::stoi(val());
    } else if (a == "--qgemv-stream-stages") {
      qgemv_stream_stages = std::stoi(val());
    } else if (a == "--qgemm-max-m") {
      qgemm_max_m = std::stoi(val());
    } else if (a == "--qgemm-bf16") {
      qgemm_bf16 = choice("on", "off") == "on";
    } else if (a == "--max-splits") {
      split_cap = std::stoi(val());
    } else if (a == "--pdl") {
      pdl = choice("on", "off") == "on";
    } else if (a == "--gemv-bench") {
      gemv = true;
    } else if (a == "--gemv-waves") {
      gemv_waves = std::stoi(val());
    } else if (a == "--kv-transfer")
      kv_transfer = true;
    else if (a == "--tokens")
      transfer_tokens = std::stoi(val());
    else if (a == "--layers")
      layers = std::stoi(val());
    else if (a == "--moe-gemv-max")
      moe_gemv_max = std::stoi(val());
    else if (a == "--moe-lowbit-gemv-max")
      moe_lowbit_gemv_max = std::stoi(val());
    else if (a == "--moe-grouped")
      moe_grouped = val() == "on";
    else if (a == "--moe-lowbit-gemm")
      moe_lowbit_gemm = val() == "on";
    else if (a == "--moe-gguf-qgemv")
      moe_gguf_qgemv = val() == "on";
    else if (a == "--moe-gemm-rows")
      moe_gemm_rows = std::stoi(val());
    else if (a == "--experts")
      experts_fmt = val();
    else if (a == "--context")
      context = std::stoi(val());
    else if (a == "--dsa-mma")
      dsa_mma = val() == "on";
    else if (a == "--mla-prefill")
      mla_chunks = val() == "chunks";
    else if (a == "--attention")
      attention = val();
    else
      throw Error(ErrorCode::kInvalidArgument, "unknown flag " + a);
  }
  ModelConfig cfg =
      moe_model(model) ? make_model_config(moe_make_options(model, layers)) : llama_config(model);
  if (kv_transfer) return kv_transfer_bench(cfg, model, transfer_tokens);
  if (gemv) return gemv_bench(rates, cfg, pdl, gemv_waves);
  cuda::CudaContext ctx;
  cuda::CudaRunnerOptions o;
  o.block_size = block_size;
  o.max_batch_tokens = 8192;
  o.max_seqs = 256;
  o.max_logits_rows = 256 * (1 + verify_k);
  o.max_model_len = 8192 + 16;
  o.profile = profile;
  o.cuda_graphs = graphs;
  o.kernels.gemv_max_m = gemv_max_m;
  o.kernels.fused_decode_max_m = fused_max_m;
  o.kernels.fused_gemv_mma = fused_mma;
  o.kernels.fused_gemv_waves = fused_waves;
  o.kernels.qgemv_mma_min_m = qgemv_mma_min_m;
  o.kernels.qgemm_max_m = qgemm_max_m;
  o.kernels.qgemm_bf16 = qgemm_bf16;
  o.kernels.qgemv_stream_stages = qgemv_stream_stages;
  o.kernels.dsa_scores_mma = dsa_mma;
  o.kernels.mla_prefill_chunks = mla_chunks;
  o.programmatic_launch = pdl;
  o.kernels.attn_split_cap = split_cap;
  o.kernels.moe_gemv_max_tokens = moe_gemv_max;
  o.kernels.moe_lowbit_gemv_max_tokens = moe_lowbit_gemv_max;
  o.kernels.moe_grouped_gemm = moe_grouped;
  o.kernels.moe_lowbit_gemm = moe_lowbit_gemm;
  o.kernels.moe_gguf_qgemv = moe_gguf_qgemv;
  o.kernels.moe_gemm_rows = moe_gemm_rows;
  if (context > 0) {
    if (attention != "both" && attention != "dsa" && attention != "dense")
      throw Error(ErrorCode::kInvalidArgument, "--attention: both, dsa or dense");
    std::printf("# %s, %lld layers on %s, batch-1 decode at %d over a random latent cache\n",
                model.c_str(), static_cast<long long>(cfg.num_layers), ctx.device_name().c_str(),
                context);
    double dsa_ms = 0, dense_ms = 0;
    if (attention != "dense")
      dsa_ms = long_context_decode(ctx, cfg, o, context, steps, false, profile);
    if (attention != "dsa")
      dense_ms = long_context_decode(ctx, cfg, o, context, steps, true, profile);
    if (dsa_ms > 0 && dense_ms > 0)
      std::printf("| glm-5 | DSA / dense at %d: %.3f |\n", context, dsa_ms / dense_ms);
    return 0;
  }
  if (experts_fmt != "auto" && experts_fmt != "mxfp4" && experts_fmt != "bf16")
    throw Error(ErrorCode::kInvalidArgument, "--experts: auto, mxfp4 or bf16");
  o.random_experts_mxfp4 =
      experts_fmt == "mxfp4" || (experts_fmt == "auto" && gpt_oss_model(model));
  o.quantized_weights = keep_quantized ? cuda::QuantizedWeights::kOn : cuda::QuantizedWeights::kOff;
  const int max_seqs = *std::max_element(seqs.begin(), seqs.end());
  const int prompt = 512;
  const int len0 = std::max(prompt + steps + verify_k, long_prefill ? 8192 : 0);
  o.num_kv_blocks =
      Bench::blocks_needed(std::max(max_seqs, 1), len0, prompt + steps + verify_k, o.block_size);
  const auto t_load = Clock::now();
  std::string weights;
  if (!model_dir.empty()) {
    // The same writer as `keel make-model --shape 1b|8b --dtype bf16` (HF safetensors).
    MakeModelOptions mo = moe_model(model) ? moe_make_options(model, layers) : MakeModelOptions{};
    mo.shape = moe_model(model) ? mo.shape : model;
    mo.dtype = o.random_experts_mxfp4 ? DType::kMXFP4 : DType::kBF16;  // MXFP4: experts only
    mo.seed = 1234;
    mo.out = model_dir;
    if (!std::filesystem::exists(model_dir + "/model.safetensors")) {
      const auto r = make_model(mo);
      std::printf("# make-model %s: %.2f GB in %.1f s\n", model_dir.c_str(), r.bytes / 1e9,
                  r.seconds);
    }
    cfg = make_model_config(mo);
    weights = model_dir;
  }
  if (!gguf_path.empty()) {
    if (moe_model(model)) throw Error(ErrorCode::kInvalidArgument, "--make-gguf: --model 1b or 8b");
    MakeModelOptions mo = gguf_make_options(model, gguf_dtype);
    mo.out = gguf_path;
    if (!std::filesystem::exists(gguf_path)) {
      const auto r = make_model(mo);
      std::printf("# make-model %s (%s): %.2f GB in %.1f s\n", gguf_path.c_str(),
                  gguf_dtype.c_str(), r.bytes / 1e9, r.seconds);
    }
    weights_path = gguf_path;
  }
  if (!weights_path.empty()) {
    // e.g. `keel make-model --shape 8b --dtype q4_k_m --format gguf`: its config is the file's.
    weights = weights_path;
    cfg = ModelWeights::open(weights_path)->config();
  }
  Bench bench(ctx, cfg, o, weights);
  const double weight_bytes = static_cast<double>(bench.runner().weight_bytes());
  std::printf(
      "# %s on %s: weights %.2f GB (%s), KV blocks %d, set up in %.1f s, graphs %s, GEMV for "
      "M <= %d, fused decode for M <= %d, PDL %s, attention splits cap %d, linear weights %s, "
      "quantized GEMV on tensor cores from M = %d, streamed through %d slots, quantized GEMM "
      "up to M = %d (%s), device "
      "features %s\n",
      model.c_str(), ctx.device_name().c_str(), weight_bytes / 1e9,
      weights.empty() ? (o.random_experts_mxfp4 ? "random, experts mxfp4" : "random bf16")
                      : weights.c_str(),
      bench.runner().kv().num_blocks(), seconds(t_load, Clock::now()), graphs ? "on" : "off",
      gemv_max_m, bench.runner().fused_decode_max_m(),
      pdl && ctx.features().programmatic_launch ? "on" : "off", split_cap,
      bench.runner().weight_format().c_str(), qgemv_mma_min_m, qgemv_stream_stages, qgemm_max_m,
      qgemm_bf16 ? "bf16 MMA for K-quants" : "K-quants dequantized",
      ctx.features().describe().c_str());
  // Bytes one decode token reads: every weight except the embedding table (one row), plus
  // the tied or untied LM head.
  const double embed = double(cfg.vocab_size) * cfg.hidden_size * 2;
  // A MoE step of n tokens reads the experts they route to (experts_read).
  const double experts =
      expert_bytes(cfg, bench.runner().weight_format().find("mxfp4") != std::string::npos);
  auto step_weight_bytes = [&](int n) {
    return weight_bytes - (cfg.tie_word_embeddings ? 0.0 : embed) - experts +
           experts * experts_read(cfg, n);
  };
  if (cfg.moe)
    std::printf(
        "# mixture of experts: %lld of %lld experts a token; batch-1 decode reads %.2f GB\n",
        static_cast<long long>(cfg.moe->top_k), static_cast<long long>(cfg.moe->num_experts),
        step_weight_bytes(1) / 1e9);
  {
    // What a server would have for its KV cache: free now plus this bench's own pool.
    std::size_t free_b = 0, total_b = 0;
    KEEL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const double pool =
        double(bench.runner().kv().block_bytes()) * bench.runner().kv().num_blocks();
    std::printf(
        "# device memory: %.1f GB total, weights %.1f GB, buffers %.1f GB, %.1f GB left "
        "for the KV cache\n",
        total_b / 1e9, weight_bytes / 1e9, (bench.runner().buffer_bytes() - weight_bytes) / 1e9,
        (free_b + pool) / 1e9);
  }
  bench.init_tokens(std::max(max_seqs, 1));
  bench.assign_blocks(std::max(max_seqs, 1), len0, prompt + steps + verify_k);

  std::printf("| %-5s | %-36s | %12s | %12s | %6s |\n", "model", "measure", "tok/s", "roofline",
              "% roof");
  std::printf(
      "|-------|--------------------------------------|--------------|--------------|--------|\n");
  auto row = [&](const std::string &what, double tps, double roof, int steps_timed) {
    std::printf("| %-5s | %-36s | %12.0f | %12.0f | %5.1f%% |\n", model.c_str(), what.c_str(), tps,
                roof, 100.0 * tps / roof);
    if (profile) {
      const auto ms = bench.runner().take_profile();
      std::printf("|       |   per step: gemm %.3f, attention %.3f, other %.3f ms |\n",
                  ms[0] / steps_timed, ms[1] / steps_timed, ms[2] / steps_timed);
    }
    std::fflush(stdout);
  };

  // Warm-up: cuBLASLt heuristics for the shapes used below, module load.
  bench.prefill(0, 1, prompt, 8192);
  bench.decode(1, prompt, 4);
  bench.runner().take_profile();

  // Prefill: one sequence of 512 tokens (median of 5), one of 8192 (median of 2).
  for (int len : {512, 8192}) {
    if (len == 8192 && !long_prefill) continue;
    std::vector<double> t;
    const int reps = len == 512 ? 5 : 2;
    for (int r = 0; r < reps; ++r) t.push_back(bench.prefill(0, 1, len, 8192));
    std::sort(t.begin(), t.end());
    const double flops =
        flops_per_token(cfg, len / 2.0, false) * len + 2.0 * cfg.hidden_size * cfg.vocab_size;
    row("prefill " + std::to_string(len) + " tokens (1 seq)", len / t[t.size() / 2],
        len / (flops / rates.flops), reps);
  }

  // Prompts for every concurrent sequence at once (8192 tokens per pass).
  const double tp = bench.prefill(0, max_seqs, prompt, 8192);
  row("prefill " + std::to_string(max_seqs) + " x " + std::to_string(prompt) + " (batched)",
      max_seqs * prompt / tp, 1.0 / (flops_per_token(cfg, prompt / 2.0, false) / rates.flops),
      (max_seqs * prompt + 8191) / 8192);

  std::vector<int> ns = {1};
  ns.insert(ns.end(), seqs.begin(), seqs.end());
  for (int n : ns) {
    // Untimed first: the graphs of this batch size's bucket are captured on first use
    // (tens of ms, which the timed steps counted before).
    bench.decode(n, prompt, 2);
    const double t = bench.decode(n, prompt, steps);
    const double ctx_avg = prompt + steps / 2.0;
    const double bytes = step_weight_bytes(n) + n * ctx_avg * kv_bytes_per_token(cfg);
    const double flops = n * flops_per_token(cfg, ctx_avg, true);
    const double roof_step = std::max(bytes / rates.bw, flops / rates.flops);
    row("decode " + std::to_string(n) + " seq x " + std::to_string(steps) + " tok", n * steps / t,
        n / roof_step, steps);
    if (verify_k > 0) {
      // Same positions, 1 + K tokens a sequence: the step time against the one-token
      // step's (what a speculative step costs; the goal is <= 1.15x at batch 1, K = 3).
      bench.verify(n, prompt, 2, verify_k);
      const double tv = bench.verify(n, prompt, steps, verify_k);
      std::printf(
          "| %-5s | verify %d seq x (1+%d) tok: %.3f ms a step, %.2fx the one-token step |\n",
          model.c_str(), n, verify_k, tv / steps * 1e3, tv / t);
      std::fflush(stdout);
    }
  }
  return 0;
}
}  // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.what());
    return 1;
  }
}
#endif
