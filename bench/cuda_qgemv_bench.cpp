// GGUF blocks kept quantized (issue 29) on the Llama 3.1 8B linear shapes at decode widths:
// microseconds and TB/s of the format's weight bytes per launch, by format, M and kernel,
// against the device's copy bandwidth. M <= 8: the integer-dot GEMV (k_qgemv.h; dp4a, dp4a
// streamed through shared memory: `dp4s`, QgemvParams::stream_stages, one row per ring depth
// in --stages; or the tensor cores: QgemvParams::mma) by grid cap (QgemvParams::max_waves; the
// waves column holds dp4s's ring depth instead). M > 8, the paths
// run_linear chooses between: `gemm` the integer tensor-core GEMM (Q8_0 / Q4_0; k_qgemm.h, its
// input quantization included; the waves column is QgemmParams::k_groups, 0 its own choice),
// `gemm16` the dequantizing bf16 tensor-core GEMM for K-quants (launch_qgemm_bf16; the waves column
// is QgemmBf16Params::splits from --splits, 0 its own choice, its reduce launch included), `deq`
// dequantize to bf16 + cuBLASLt (what run_linear does past qgemm_max_m rows), `dq` the
// dequantize alone (once a shape; its TB/s and % copy count the bytes read and written),
// `bf16` cuBLASLt over a bf16
// copy of the weight (what the model costs dequantized at load; timed once per shape, with the
// first format). The weights are rotated over enough copies (>= 400 MB) that no launch reads
// from L2.
//
//   cuda_qgemv_bench [--formats q4_k,q6_k,q8_0] [--m 1,2,4,8,16,32,64,128,256] [--waves 0,1,2]
//     [--k-groups 0,2,4] [--stages 2,3,4,6] [--splits 0,1,4,8]
//     [--norm on|off] [--kernels dp4a,dp4s,mma,gemm,gemm16,deq,dq,bf16]
//     [--shapes qkv,o_proj,gate_up,down,lm_head]   (one launch per shape for ncu, say)
//     (--norm on: the GEMVs' input is RMSNorm of an f32 residual row, as the fused decode path
//     feeds the qkv and gate/up GEMVs; 0 waves: the kernel's default grid cap. M > 8 reads bf16
//     rows and writes bf16, f32 for lm_head, as run_linear)
#include <cstdio>

#if !defined(KEEL_WITH_CUDA)
int main() {
  std::puts("cuda_qgemv_bench: built without CUDA");
  return 0;
}
#else
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench_args.h"
#include "core/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_context.h"
#include "exec/cuda/cuda_resources.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/k_fill.h"
#include "exec/cuda/k_qgemm.h"
#include "exec/cuda/k_qgemv.h"

namespace {
using namespace keel;

struct Shape {
  const char *name;
  std::int64_t N, K;
  cuda::GemvOut out;
};

cuda::QuantFormat parse_format(const std::string &f) {
  if (f == "q4_k") return cuda::QuantFormat::kQ4_K;
  if (f == "q5_k") return cuda::QuantFormat::kQ5_K;
  if (f == "q6_k") return cuda::QuantFormat::kQ6_K;
  if (f == "q8_0") return cuda::QuantFormat::kQ8_0;
  if (f == "q4_0") return cuda::QuantFormat::kQ4_0;
  throw Error(ErrorCode::kInvalidArgument, "--formats: q4_k, q5_k, q6_k, q8_0 or q4_0, not " + f);
}

// Device-to-device copy bandwidth (bytes/s), the roofline of a weight-streaming kernel.
double copy_bandwidth(cuda::StreamRef s) {
  const std::size_t bytes = std::size_t(1) << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  cuda::Event t0(true), t1(true);
  std::vector<double> gbs;
  for (int r = 0; r < 6; ++r) {
    t0.record(s);
    KEEL_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice,
                                    s.get("copy bandwidth")));
    t1.record(s);
    t1.wait(std::chrono::seconds(30), "copy bandwidth");
    if (r > 0) gbs.push_back(2.0 * bytes / (cuda::Event::elapsed_ms(t0, t1) * 1e-3));
  }
  std::sort(gbs.begin(), gbs.end());
  return gbs[gbs.size() / 2];
}

int run(int argc, char **argv) {
  std::vector<std::string> formats = {"q4_k", "q6_k", "q8_0"};
  std::vector<int> ms = {1, 2, 4, 8, 16, 32, 64, 128, 256}, waves = {0, 1, 2}, k_groups = {0, 2, 4},
                   stages = {2, 3, 4, 6}, splits = {0};
  std::vector<std::string> kernels = {"dp4a", "mma", "gemm", "deq", "bf16"};
  std::vector<std::string> shape_names = {"qkv", "o_proj", "gate_up", "down", "lm_head"};
  bool norm = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw Error(ErrorCode::kInvalidArgument, a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--formats")
      formats = bench::comma_list(v);
    else if (a == "--m")
      ms = bench::int_list(v);
    else if (a == "--waves")
      waves = bench::int_list(v);
    else if (a == "--stages")
      stages = bench::int_list(v);
    else if (a == "--splits")
      splits = bench::int_list(v);
    else if (a == "--k-groups")
      k_groups = bench::int_list(v);
    else if (a == "--norm")
      norm = v == "on";
    else if (a == "--kernels")
      kernels = bench::comma_list(v);
    else if (a == "--shapes")
      shape_names = bench::comma_list(v);
    else
      throw Error(ErrorCode::kInvalidArgument, "unknown flag " + a);
  }
  cuda::CudaContext ctx;
  const cuda::StreamRef s = ctx.compute();
  const double bw = copy_bandwidth(s);
  // Llama 3.1 8B: hidden 4096, intermediate 14336, 32 + 2 x 8 heads of 128, vocab 128,256.
  const Shape shapes[] = {{"qkv 6144x4096", 6144, 4096, cuda::GemvOut::kBf16},
                          {"o_proj 4096x4096 +res", 4096, 4096, cuda::GemvOut::kAddResidual},
                          {"gate_up 28672x4096 swiglu", 28672, 4096, cuda::GemvOut::kSwiglu},
                          {"down 4096x14336 +res", 4096, 14336, cuda::GemvOut::kAddResidual},
                          {"lm_head 128256x4096 f32", 128256, 4096, cuda::GemvOut::kF32}};
  std::printf(
      "# k_qgemv on %s, copy bandwidth %.2f TB/s, input %s; median of 30 spans of 8 launches\n",
      ctx.device_name().c_str(), bw / 1e12, norm ? "RMSNorm of f32 rows" : "bf16 rows");
  for (const std::string &k : kernels)
    if (k != "dp4a" && k != "dp4s" && k != "mma" && k != "gemm" && k != "gemm16" && k != "deq" &&
        k != "dq" && k != "bf16")
      throw Error(ErrorCode::kInvalidArgument,
                  "--kernels: dp4a, dp4s, mma, gemm, gemm16, deq, dq or bf16, not " + k);
  const int max_m = *std::max_element(ms.begin(), ms.end());
  cuda::Gemm gemm(ctx);
  std::printf("| %-4s | %-26s | %3s | %-4s | %5s | %9s | %6s | %6s |\n", "fmt", "shape", "M",
              "kern", "waves", "us", "TB/s", "% copy");
  std::printf(
      "|------|----------------------------|-----|------|-------|-----------|--------|--------|\n");
  for (const std::string &fname : formats) {
    const cuda::QuantFormat f = parse_format(fname);
    for (const Shape &sh : shapes) {
      const std::string short_name(sh.name, std::string_view(sh.name).find(' '));
      if (std::find(shape_names.begin(), shape_names.end(), short_name) == shape_names.end())
        continue;
      const std::size_t wbytes =
          std::size_t(sh.N) * (sh.K / cuda::quant_block_elems(f)) * cuda::quant_block_bytes(f);
      const std::size_t stride = (wbytes + 255) / 256 * 256;
      const int copies = static_cast<int>(std::max<std::size_t>(9, (400u << 20) / wbytes + 1));
      const std::size_t rows_max = std::max(8, max_m);
      cuda::DeviceBuffer w(stride * copies), x(rows_max * sh.K * 2), res(std::size_t(8) * sh.K * 4),
          nw(std::size_t(sh.K) * 2), y(rows_max * sh.N * 4),
          staged(cuda::qgemm_input_bytes(static_cast<int>(rows_max), sh.K)),
          dq(std::size_t(sh.N) * sh.K * 2),
          ws(std::max<std::size_t>(
              16, cuda::qgemm_bf16_workspace_bytes(static_cast<int>(rows_max), sh.N)));
      // Small random values everywhere: the blocks' f16 scales stay finite.
      cuda::launch_fill_uniform(s, w.as<cuda::bf16>(), std::int64_t(stride / 2) * copies, 7, -0.05f,
                                0.05f);
      cuda::launch_fill_uniform(s, x.as<cuda::bf16>(), std::int64_t(rows_max) * sh.K, 8, -1.0f,
                                1.0f);
      // f32 rows whose high halves are bf16 in [-1, 1]: floats close to those values.
      cuda::launch_fill_uniform(s, res.as<cuda::bf16>(), 16 * sh.K, 9, -1.0f, 1.0f);
      cuda::launch_fill_uniform(s, nw.as<cuda::bf16>(), sh.K, 10, 0.5f, 1.5f);
      KEEL_CUDA_CHECK(cudaMemset(y.data(), 0, y.bytes()));
      // bf16 copies of the weight (random: cuBLASLt's time does not depend on the values).
      const bool time_bf16 = fname == formats.front() &&
                             std::find(kernels.begin(), kernels.end(), "bf16") != kernels.end();
      const std::size_t bbytes = std::size_t(sh.N) * sh.K * 2;
      const int bcopies =
          time_bf16 ? static_cast<int>(std::max<std::size_t>(2, (400u << 20) / bbytes + 1)) : 0;
      cuda::DeviceBuffer wb(bbytes * std::max(bcopies, 1));
      if (time_bf16)
        cuda::launch_fill_uniform(s, wb.as<cuda::bf16>(), std::int64_t(bbytes / 2) * bcopies, 11,
                                  -0.05f, 0.05f);
      const bool y_f32 = sh.out == cuda::GemvOut::kF32;
      const cuda::GemmType yt = y_f32 ? cuda::GemmType::kF32 : cuda::GemmType::kBF16;
      for (const int M : ms) {
        for (const std::string &kern : kernels) {
          const bool gemv = kern == "dp4a" || kern == "dp4s" || kern == "mma";
          const bool dq_only = kern == "dq";
          if (dq_only ? M != ms.front()
                      : gemv != (M <= cuda::kQgemvMaxM) || (kern == "bf16" && !time_bf16))
            continue;
          const bool gemm16 = kern == "gemm16";
          if (gemm16 && !cuda::qgemm_bf16_supported(f, M, sh.K)) continue;
          if (kern == "gemm" && !cuda::qgemm_supported(f, M, sh.K, ctx.features().smem_per_block))
            continue;  // the integer GEMM: Q8_0 / Q4_0
          const std::vector<int> &variants = kern == "gemm"   ? k_groups
                                             : gemm16         ? splits
                                             : kern == "dp4s" ? stages
                                             : gemv           ? waves
                                                              : std::vector<int>{0};
          for (const int wv : variants) {
            if (kern == "dp4s" &&
                !cuda::qgemv_stream_supported(f, M, sh.K, wv, ctx.features().smem_per_block)) {
              std::printf("| %-4s | %-26s | %3d | dp4s | %5d | (shape not streamed)  |\n",
                          fname.c_str(), sh.name, M, wv);
              continue;
            }
            auto launch = [&](int r) {
              const auto *wr = w.as<unsigned char>() + std::size_t(r % copies) * stride;
              if (kern == "bf16") {
                gemm.run(s, cuda::GemmType::kBF16, yt, x.data(),
                         wb.as<unsigned char>() + std::size_t(r % bcopies) * bbytes, y.data(), M,
                         sh.N, sh.K);
                return;
              }
              if (dq_only || kern == "deq") {
                cuda::launch_dequantize(s, f, wr, dq.as<cuda::bf16>(), sh.N * sh.K);
                if (!dq_only)
                  gemm.run(s, cuda::GemmType::kBF16, yt, x.data(), dq.data(), y.data(), M, sh.N,
                           sh.K);
                return;
              }
              if (gemm16) {
                cuda::QgemmBf16Params p;
                p.format = f;
                p.w = wr;
                p.N = sh.N;
                p.K = sh.K;
                p.M = M;
                p.x = x.as<cuda::bf16>();
                p.y_f32 = y_f32;
                p.y = y.data();
                p.workspace = ws.data();
                p.workspace_bytes = ws.bytes();
                p.splits = wv;
                cuda::launch_qgemm_bf16(s, p, ctx.num_sms());
                return;
              }
              if (kern == "gemm") {
                cuda::launch_qgemm_quantize_input(s, x.as<cuda::bf16>(), 0, M, sh.K, staged.data());
                cuda::QgemmParams p;
                p.format = f;
                p.w = wr;
                p.N = sh.N;
                p.K = sh.K;
                p.M = M;
                p.staged = staged.data();
                p.y_f32 = y_f32;
                p.y = y.data();
                p.k_groups = wv;
                cuda::launch_qgemm(s, p, ctx.num_sms());
                return;
              }
              cuda::QgemvParams p;
              p.format = f;
              p.w = wr;
              p.N = sh.N;
              p.K = sh.K;
              p.M = M;
              if (norm && sh.out != cuda::GemvOut::kAddResidual) {
                p.in = cuda::GemvIn::kRmsNorm;
                p.residual = res.as<float>();
                p.norm_weight = nw.as<cuda::bf16>();
              } else {
                p.in = cuda::GemvIn::kBf16;
                p.x = x.as<cuda::bf16>();
              }
              p.out = sh.out;
              p.y = y.data();
              p.pdl = ctx.features().programmatic_launch;
              p.max_waves = kern == "dp4s" ? 0 : wv;
              p.stream_stages = kern == "dp4s" ? wv : 0;
              p.mma = kern == "mma";
              cuda::launch_qgemv(s, p, ctx.num_sms());
            };
            // 8 launches back to back per timed span, as a decode step chains them (PDL
            // overlaps one's prologue with the previous one's tail).
            constexpr int kPer = 8;
            std::vector<double> t;
            cuda::Event a(true), b(true);
            for (int r = 0; r < 33; ++r) {
              a.record(s);
              for (int i = 0; i < kPer; ++i) launch(r * kPer + i);
              b.record(s);
              b.wait(std::chrono::seconds(30), "qgemv bench");
              if (r >= 3) t.push_back(cuda::Event::elapsed_ms(a, b) * 1e3 / kPer);
            }
            std::sort(t.begin(), t.end());
            // TB/s of the format's bytes for every kernel (bf16 too): the same work, so the
            // column compares them directly.
            // dq: the bytes it reads and writes.
            const double bytes = dq_only ? wbytes + double(sh.N) * sh.K * 2 : double(wbytes);
            const double us = t[t.size() / 2], tbs = bytes / (us * 1e-6) / 1e12;
            std::printf("| %-4s | %-26s | %3d | %-4s | %5d | %9.1f | %6.2f | %5.1f%% |\n",
                        kern == "bf16" ? "bf16" : fname.c_str(), sh.name, M, kern.c_str(), wv, us,
                        tbs, 100.0 * tbs * 1e12 / bw);
            std::fflush(stdout);
          }
        }
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "cuda_qgemv_bench: %s\n", e.what());
    return 2;
  }
}
#endif
