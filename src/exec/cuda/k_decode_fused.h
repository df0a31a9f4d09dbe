// Fused kernels for decode steps with few token rows (M <= kFusedGemvMaxM): the linear
// layers as GEMVs whose prologue builds the input row (RMSNorm of the f32 residual
// stream, SwiGLU of the gate|up activation, or a plain bf16 copy) in shared memory and
// whose epilogue adds into the residual stream, plus one kernel for a fused qkv
// activation's bias, q/k norm, RoPE and KV-cache write. Per layer this replaces 10-11
// launches (norm, GEMM, rope, kv write, attention (+ combine), GEMM, norm, GEMM, swiglu,
// GEMM) by 6-7.
//
// Every kernel here may be launched with programmatic dependent launch (Hopper PDL,
// `pdl`): it then starts while the previous kernel on the stream drains, issues its first
// weight loads (weights never depend on the previous kernel), and waits
// (griddepcontrol.wait) before touching anything the previous kernel writes or reads.
// Launched without it, the wait is a no-op. See k_decode_fused.cu and NOTES.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

constexpr int kFusedGemvMaxM = 8;
// Rows the CUDA-core GEMV kernel takes (its cost grows with M); more run on the tensor
// cores. From kFusedGemvMmaMinM rows on (and for every M when the tensor-core kernel is
// asked for) the tensor-core kernel runs where K is a multiple of 32.
constexpr int kFusedGemvCoreMaxM = 4;
constexpr int kFusedGemvMmaMinM = 2;

enum class GemvIn : std::uint8_t {
  kBf16,     // x [M, K] bf16
  kRmsNorm,  // x[m] = bf16(residual[rows ? rows[m] : m] * rsqrt(mean sq + eps) * norm_weight)
};
enum class GemvOut : std::uint8_t {
  kBf16,         // y [M, N] bf16
  kF32,          // y [M, N] f32
  kAddResidual,  // y = residual [M, N] f32: y[m, n] += f32(bf16(W x)), as proj then add does
  // W = [gate; up] ([N = 2I, K]): y [M, I] bf16 = silu(gate x) * (up x), each product
  // rounded to bf16 first (as the unfused GEMM + launch_swiglu); a warp does both rows.
  kSwiglu,
};

struct FusedGemvParams {
  const bf16 *w = nullptr;  // [N, K] bf16, 16-byte aligned
  std::int64_t N = 0, K = 0;
  int M = 0;
  GemvIn in = GemvIn::kBf16;
  const bf16 *x = nullptr;             // kBf16: [M, K]
  const float *residual = nullptr;     // kRmsNorm: [*, K] f32
  const std::int32_t *rows = nullptr;  // kRmsNorm: residual row of input m (nullable: m)
  const bf16 *norm_weight = nullptr;   // kRmsNorm: [K]
  float eps = 1e-5f;
  GemvOut out = GemvOut::kBf16;
  void *y = nullptr;
  bool pdl = false;  // programmatic dependent launch
  // Grid size: one output row per warp (a group of rows per block on the tensor cores),
  // capped at max_waves times the blocks that fit on the device at once (beyond that
  // warps loop over rows); 0: the default (4 on the CUDA cores, 1 on the tensor cores).
  int max_waves = 0;
  // The tensor-core kernel: -1 as fused_gemv_uses_mma decides, 0 never (M <= 4), 1 always
  // where K allows (bench comparisons).
  int mma = -1;
};

// True when a launch of M rows over K runs the tensor-core kernel (`mma` as
// FusedGemvParams::mma): K a multiple of 32, and M > kFusedGemvCoreMaxM, or
// M >= kFusedGemvMmaMinM unless mma is 0, or mma is 1.
bool fused_gemv_uses_mma(int M, std::int64_t K, int mma = -1);
// Dynamic shared memory the kernel stages its input in: M x K bf16.
std::size_t fused_gemv_smem_bytes(int M, std::int64_t K);
// Shared memory a launch stages its input in: none for a bf16 input on the tensor cores
// (read from L2), else M x K bf16.
std::size_t fused_gemv_staged_bytes(int M, std::int64_t K, GemvIn in, int mma = -1);
// True when launch_fused_gemv runs the shape: 1 <= M <= kFusedGemvMaxM, K a positive
// multiple of 8 (of 32 for M > kFusedGemvCoreMaxM) whose staged input (`in`, with the
// kernel fused_gemv_uses_mma picks by default) fits in smem_per_block bytes of shared
// memory (CudaFeatures::smem_per_block) and in the kernel's own cap.
bool fused_gemv_supported(int M, std::int64_t K, std::size_t smem_per_block,
                          GemvIn in = GemvIn::kRmsNorm);
// num_sms sizes the persistent grid (CudaContext::num_sms()).
void launch_fused_gemv(StreamRef s, const FusedGemvParams &p, int num_sms);

// qkv [T, (nq + 2 nkv) hd] bf16 in place: bias (nullable), q/k head RMSNorm (nullable),
// RoPE on q and k (as launch_rope), then K and V of token t written to cache slot
// slots[t] (skipped when < 0), as launch_kv_write. Same results as launch_qkv_bias_norm,
// launch_rope and launch_kv_write in a row, in one launch (a warp per head).
struct QkvRopeKvParams {
  bf16 *qkv = nullptr;
  int T = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  const bf16 *bias = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  float eps = 1e-5f;
  const std::int32_t *positions = nullptr;  // [T]
  const float *inv_freq = nullptr;          // [head_dim / 2]
  float mscale = 1.0f;
  bool interleaved = false;
  const std::int32_t *slots = nullptr;  // [T]
  bf16 *cache = nullptr;
  KvLayout layout;
  int layer = 0;
  bool pdl = false;
};
void launch_qkv_rope_kv(StreamRef s, const QkvRopeKvParams &p);

}  // namespace keel::cuda
