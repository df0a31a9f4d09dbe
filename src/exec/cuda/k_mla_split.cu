// The split-K (flash-decoding) path of the absorbed MLA attention (k_mla_attention.h), for
// decode-size steps. Three kernels:
//
// mla_absorb_kernel, grid (head, ceil(T / kTok)): qa[t, h] = W_kb[h]^T q_nope[t, h] for kTok
//   tokens at a time (W_kb read once per kTok tokens, not once per split CTA), bf16 out.
// mla_split_kernel, grid (tile, head group of 16, split), 4 warps: each query of the tile
//   takes the split's range of its keys 0..p (or of its DSA selection) in chunks of kN keys,
//   double-buffered by cp.async into shared memory (rows past the range zero-filled). The
//   16 heads' queries Q = [qa | rope(q_rope)] (bf16, zero columns padding to a multiple of
//   16) sit in shared memory; scores S = Q K^T on the tensor cores (m16n8k16: heads are M,
//   each warp 8 keys as N, the row's kv_lora + rope as K), an fp32 online softmax per head
//   (8 threads a head), P rounded to bf16, then O += P C (keys as K, each warp a quarter of
//   kv_lora as N, the C fragments by ldmatrix.trans as the flash kernel's V). One latent row
//   read from L2 / HBM serves 16 heads. Writes the unnormalized O, m and l per (query,
//   split, head) to the partial scratch; an empty split writes m = -inf, l = 0.
// mla_combine_kernel, grid (head, ceil(T / kTok)): merges each token's splits (weights
//   exp(m_s - M) / L) into lat [kv_lora] fp32, then out = W_vb lat, W_vb read once per kTok
//   tokens.
#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_cp_async.cuh"
#include "exec/cuda/k_mla_rope.cuh"
#include "exec/cuda/k_mla_split.h"
#include "exec/cuda/k_mma.cuh"
#include "exec/cuda/k_reduce.cuh"

namespace keel::cuda {

namespace {

using reduce::warp_max;
using reduce::warp_sum;

using mla_detail::rope_index;
using mla_detail::rope_pair;

constexpr int kThreads = 128;  // the split kernel: 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kG = kMlaHeadGroup;            // heads a split CTA (the mma's M)
constexpr int kN = 32;                       // keys a chunk: 8 per warp for the scores
constexpr int kMaxR = 512;                   // kv_lora at most (the value accumulators' registers)
constexpr int kMaxW = 640;                   // kv_lora + rope at most (shared memory)
constexpr int kPairs = kMaxR / 16 / kWarps;  // 16-wide column pairs of O a warp, at most
constexpr int kAuxThreads = 256;             // absorb and combine: 8 warps
constexpr int kTok = 8;                      // tokens an absorb / combine CTA
constexpr int kMaxSplits = 256;
constexpr int kMaxNope = 1024;  // absorb's staged q_nope [kTok][nope] f32 in 32 KB
static_assert(kThreads == kG * 8, "the online softmax takes 8 threads a head");
static_assert(kN == 8 * kWarps, "the scores take 8 keys a warp");
static_assert(kAuxThreads / 32 == kTok, "the combine merges a token a warp");

__host__ __device__ inline int padded_width(int kv_lora, int rope) {
  return (kv_lora + rope + 15) / 16 * 16;
}
// Row stride of Q and the key chunks in shared memory, in bf16: +8 spreads the rows of a
// fragment load over the banks (16-byte aligned rows for cp.async and ldmatrix).
__host__ __device__ inline int row_ld(int kv_lora, int rope) {
  return padded_width(kv_lora, rope) + 8;
}
__host__ __device__ inline std::size_t split_smem_bytes(int kv_lora, int rope) {
  const std::size_t ld = row_ld(kv_lora, rope);
  return (kG + 2 * kN) * ld * sizeof(bf16) + kG * kN * sizeof(float) +
         kG * (kN + 8) * sizeof(bf16) + kG * sizeof(float);
}
std::size_t align256(std::size_t n) { return (n + 255) / 256 * 256; }

__device__ __forceinline__ std::uint32_t smem_u32(const void *p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
using async_copy::cp_async16;
using async_copy::cp_async_commit;
using async_copy::cp_async_wait;
__device__ __forceinline__ std::uint32_t ld_u32(const bf16 *p) {
  return *reinterpret_cast<const std::uint32_t *>(p);
}

__global__ void __launch_bounds__(kAuxThreads) mla_absorb_kernel(MlaAttnParams p, bf16 *qa) {
  extern __shared__ float qn[];  // [kTok][nope]
  const int h = blockIdx.x, t0 = blockIdx.y * kTok, nt = min(kTok, p.T - t0);
  const int R = p.kv_lora, H = p.num_heads, qk = p.nope + p.rope;
  for (int i = threadIdx.x; i < kTok * p.nope; i += kAuxThreads) {
    const int j = i / p.nope, d = i % p.nope;
    qn[i] = j < nt ? __bfloat162float(p.q[(std::int64_t(t0 + j) * H + h) * qk + d]) : 0.0f;
  }
  __syncthreads();
  const bf16 *wk = p.kv_b + std::int64_t(h) * (p.nope + p.v) * R;  // [nope, R]
  for (int r = threadIdx.x; r < R; r += kAuxThreads) {
    float acc[kTok] = {};
    for (int d = 0; d < p.nope; ++d) {
      const float w = __bfloat162float(wk[std::int64_t(d) * R + r]);
#pragma unroll
      for (int j = 0; j < kTok; ++j) acc[j] += qn[j * p.nope + d] * w;
    }
#pragma unroll
    for (int j = 0; j < kTok; ++j)
      if (j < nt) qa[(std::int64_t(t0 + j) * H + h) * R + r] = __float2bfloat16(acc[j]);
  }
}

__global__ void __launch_bounds__(kThreads)
    mla_split_kernel(MlaAttnParams p, const bf16 *qa_all, float *part) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int R = p.kv_lora, rope = p.rope, H = p.num_heads, W = R + rope;
  const int wp = padded_width(R, rope), ld = row_ld(R, rope);
  bf16 *qs = reinterpret_cast<bf16 *>(smem);                      // [kG][ld]
  bf16 *ks = qs + kG * ld;                                        // [2][kN][ld]
  float *ss = reinterpret_cast<float *>(ks + 2 * kN * ld);        // [kG][kN] scores
  bf16 *ps = reinterpret_cast<bf16 *>(ss + kG * kN);              // [kG][kN + 8] probabilities
  float *corr_s = reinterpret_cast<float *>(ps + kG * (kN + 8));  // [kG]
  constexpr int kPld = kN + 8;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t4 = lane % 4;
  const AttnTile tile = p.tiles[blockIdx.x];
  const int h0 = blockIdx.y * kG;
  const int S = gridDim.z, split = blockIdx.z;
  const int bs = p.layout.block_size;
  const int segs = W / 8;  // 16-byte pieces of a row copied
  const uint4 zero = make_uint4(0, 0, 0, 0);

  // Columns [W, wp) of both key stages stay zero (no copy writes them).
  for (int i = tid; i < 2 * kN * (wp - W) / 8; i += kThreads) {
    const int row = i / ((wp - W) / 8), c = i % ((wp - W) / 8);
    *reinterpret_cast<uint4 *>(ks + row * ld + W + c * 8) = zero;
  }

  for (int j = 0; j < tile.num_q; ++j) {
    const int tq = tile.q_start + j, pos = tile.pos0 + j;
    const bool sparse = p.sel != nullptr && pos + 1 > p.topk;
    const int nkeys = sparse ? p.topk : pos + 1;
    const std::int32_t *sel = sparse ? p.sel + std::int64_t(tq) * p.topk : nullptr;
    // This split's keys [k_begin, k_end): whole chunks, the last split the remainder.
    const int per = ((nkeys + S - 1) / S + kN - 1) / kN * kN;
    const int k_begin = min(nkeys, split * per), k_end = min(nkeys, k_begin + per);
    float *out = part + (std::int64_t(tq) * S + split) * H * (R + 2);
    __syncthreads();         // the previous query's reads of qs / ks are done
    if (k_begin >= k_end) {  // uniform over the block
      for (int r = tid; r < kG; r += kThreads)
        if (h0 + r < H) {
          out[(h0 + r) * (R + 2) + R] = -INFINITY;
          out[(h0 + r) * (R + 2) + R + 1] = 0.0f;
        }
      continue;
    }

    // Q rows: [qa | rope(q_rope, pos) | zeros], zero rows for heads past H.
    for (int i = tid; i < kG * (R / 2); i += kThreads) {
      const int row = i / (R / 2), c = i % (R / 2), h = h0 + row;
      const std::uint32_t v = h < H ? ld_u32(qa_all + (std::int64_t(tq) * H + h) * R + 2 * c) : 0u;
      *reinterpret_cast<std::uint32_t *>(qs + row * ld + 2 * c) = v;
    }
    for (int i = tid; i < kG * (rope / 2); i += kThreads) {
      const int row = i / (rope / 2), pi = i % (rope / 2), h = h0 + row;
      int a, b;
      rope_index(pi, rope, p.rp.interleaved, a, b);
      float y1 = 0, y2 = 0;
      if (h < H) {
        const bf16 *q = p.q + (std::int64_t(tq) * H + h) * (p.nope + rope) + p.nope;
        rope_pair(pi, static_cast<float>(pos), p.rp, __bfloat162float(q[a]), __bfloat162float(q[b]),
                  y1, y2);
      }
      qs[row * ld + R + a] = __float2bfloat16(y1);
      qs[row * ld + R + b] = __float2bfloat16(y2);
    }
    for (int i = tid; i < kG * (wp - W); i += kThreads)
      qs[(i / (wp - W)) * ld + W + i % (wp - W)] = __float2bfloat16(0.0f);

    // Chunk [k0, k0 + kN) into stage `st`: a warp per key row, lanes over its 16-byte pieces.
    auto load = [&](int k0, int st) {
      bf16 *dst = ks + st * kN * ld;
      for (int kk = warp; kk < kN; kk += kWarps) {
        bf16 *d = dst + kk * ld;
        if (k0 + kk < k_end) {
          const int key = sparse ? sel[k0 + kk] : k0 + kk;
          const std::int32_t block = p.block_table[tile.block_offset + key / bs];
          const bf16 *src = p.cache + p.layout.offset(block, p.layer, 0, key % bs);
          for (int c = lane; c < segs; c += 32) cp_async16(d + c * 8, src + c * 8);
        } else {
          for (int c = lane; c < segs; c += 32) *reinterpret_cast<uint4 *>(d + c * 8) = zero;
        }
      }
    };

    float acc[kPairs][2][4] = {};
    float m_run = -INFINITY, l_run = 0;  // head tid / 8's, kept by its 8 softmax threads
    const int nchunks = (k_end - k_begin + kN - 1) / kN;
    load(k_begin, 0);
    cp_async_commit();
    for (int c = 0; c < nchunks; ++c) {
      const int k0 = k_begin + c * kN;
      if (c + 1 < nchunks) {
        load(k0 + kN, (c + 1) & 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      const bf16 *kc = ks + (c & 1) * kN * ld;

      {  // Scores of the 16 heads x this warp's 8 keys.
        float sc[4] = {0, 0, 0, 0};
        const bf16 *q0 = qs + g * ld + 2 * t4, *q1 = qs + (g + 8) * ld + 2 * t4;
        const bf16 *kr = kc + (warp * 8 + g) * ld + 2 * t4;
        for (int k = 0; k < wp; k += 16) {
          const std::uint32_t a[4] = {ld_u32(q0 + k), ld_u32(q1 + k), ld_u32(q0 + k + 8),
                                      ld_u32(q1 + k + 8)};
          mma_bf16(sc, a, ld_u32(kr + k), ld_u32(kr + k + 8));
        }
        const int n = k_end - k0, key = warp * 8 + 2 * t4;
        ss[g * kN + key] = key < n ? sc[0] * p.scale : -INFINITY;
        ss[g * kN + key + 1] = key + 1 < n ? sc[1] * p.scale : -INFINITY;
        ss[(g + 8) * kN + key] = key < n ? sc[2] * p.scale : -INFINITY;
        ss[(g + 8) * kN + key + 1] = key + 1 < n ? sc[3] * p.scale : -INFINITY;
      }
      __syncthreads();

      {  // Online softmax: 8 threads (consecutive lanes) a head, 4 keys each.
        const int hh = tid / 8, k4 = (tid % 8) * 4;
        float s[4], mx = -INFINITY;
#pragma unroll
        for (int e = 0; e < 4; ++e) mx = fmaxf(mx, s[e] = ss[hh * kN + k4 + e]);
        for (int o = 1; o < 8; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float m_new = fmaxf(m_run, mx);      // finite: the chunk has a key in range
        const float corr = __expf(m_run - m_new);  // 0 on the first chunk
        float sum = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pe = __expf(s[e] - m_new);
          sum += pe;
          ps[hh * kPld + k4 + e] = __float2bfloat16(pe);
        }
        for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        l_run = l_run * corr + sum;
        m_run = m_new;
        if (tid % 8 == 0) corr_s[hh] = corr;
      }
      __syncthreads();

      {  // O = O corr + P C: this warp's column pairs warp, warp + 4, ... of kv_lora.
        const float c0 = corr_s[g], c1 = corr_s[g + 8];
#pragma unroll
        for (int i = 0; i < kPairs; ++i)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            acc[i][hf][0] *= c0;
            acc[i][hf][1] *= c0;
            acc[i][hf][2] *= c1;
            acc[i][hf][3] *= c1;
          }
#pragma unroll
        for (int kk = 0; kk < kN / 16; ++kk) {
          const bf16 *p0 = ps + g * kPld + kk * 16 + 2 * t4, *p1 = p0 + 8 * kPld;
          const std::uint32_t a[4] = {ld_u32(p0), ld_u32(p1), ld_u32(p0 + 8), ld_u32(p1 + 8)};
          // ldmatrix.x4.trans: lanes 0-15 the key rows kk*16.., lanes 16-31 the same rows 8
          // columns on: b0, b1 the pair's first 8 columns, b2, b3 its second.
          const bf16 *vrow = kc + (kk * 16 + (lane & 15)) * ld + (lane >> 4) * 8;
#pragma unroll
          for (int i = 0; i < kPairs; ++i) {
            const int pr = warp + kWarps * i;
            if (pr < R / 16) {
              std::uint32_t b0, b1, b2, b3;
              asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                           : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                           : "r"(smem_u32(vrow + pr * 16)));
              mma_bf16(acc[i][0], a, b0, b1);
              mma_bf16(acc[i][1], a, b2, b3);
            }
          }
        }
      }
      __syncthreads();  // this stage is refilled by the next iteration's copy
    }

    if (tid % 8 == 0 && h0 + tid / 8 < H) {
      float *e = out + (h0 + tid / 8) * (R + 2);
      e[R] = m_run;
      e[R + 1] = l_run;
    }
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int pr = warp + kWarps * i;
      if (pr >= R / 16) continue;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int col = pr * 16 + hf * 8 + 2 * t4;
        if (h0 + g < H)
          *reinterpret_cast<float2 *>(out + (h0 + g) * (R + 2) + col) =
              make_float2(acc[i][hf][0], acc[i][hf][1]);
        if (h0 + g + 8 < H)
          *reinterpret_cast<float2 *>(out + (h0 + g + 8) * (R + 2) + col) =
              make_float2(acc[i][hf][2], acc[i][hf][3]);
      }
    }
  }
}

__global__ void __launch_bounds__(kAuxThreads)
    mla_combine_kernel(MlaAttnParams p, const float *part) {
  __shared__ float wsm[kTok][kMaxSplits];  // each split's weight exp(m_s - M) / L
  __shared__ __align__(16) float lat[kTok][kMaxR];
  const int h = blockIdx.x, t0 = blockIdx.y * kTok, nt = min(kTok, p.T - t0);
  const int R = p.kv_lora, H = p.num_heads, S = p.num_splits;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;  // warp j: token t0 + j
  const std::int64_t split_stride = std::int64_t(H) * (R + 2);
  if (warp < nt) {
    const float *e = part + (std::int64_t(t0 + warp) * S * H + h) * (R + 2);
    float M = -INFINITY;
    for (int s = lane; s < S; s += 32) M = fmaxf(M, e[s * split_stride + R]);
    M = warp_max(M);  // finite: split 0 has a key
    float L = 0;
    for (int s = lane; s < S; s += 32) {
      const float l = e[s * split_stride + R + 1];
      const float w = l > 0 ? __expf(e[s * split_stride + R] - M) : 0.0f;
      wsm[warp][s] = w;
      L += w * l;
    }
    const float inv = 1.0f / warp_sum(L);
    for (int s = lane; s < S; s += 32) wsm[warp][s] *= inv;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTok * R; i += kAuxThreads) {
    const int j = i / R, r = i % R;
    float acc = 0;
    if (j < nt) {
      const float *e = part + (std::int64_t(t0 + j) * S * H + h) * (R + 2) + r;
      for (int s = 0; s < S; ++s)
        if (wsm[j][s] != 0.0f) acc += wsm[j][s] * e[s * split_stride];  // skips empty splits
    }
    lat[j][r] = acc;
  }
  __syncthreads();
  const bf16 *wv = p.kv_b + (std::int64_t(h) * (p.nope + p.v) + p.nope) * R;  // [v, R]
  for (int d = warp; d < p.v; d += kAuxThreads / 32) {
    float acc[kTok] = {};
    for (int r = 2 * lane; r < R; r += 64) {
      const float2 w = __bfloat1622float2(
          *reinterpret_cast<const __nv_bfloat162 *>(wv + std::int64_t(d) * R + r));
#pragma unroll
      for (int j = 0; j < kTok; ++j) acc[j] += w.x * lat[j][r] + w.y * lat[j][r + 1];
    }
#pragma unroll
    for (int j = 0; j < kTok; ++j) {
      const float o = warp_sum(acc[j]);
      if (lane == 0 && j < nt)
        p.out[(std::int64_t(t0 + j) * H + h) * p.v + d] = __float2bfloat16(o);
    }
  }
}

}  // namespace

std::size_t mla_split_scratch_bytes(int T, int num_heads, int kv_lora, int splits) {
  return align256(std::size_t(T) * num_heads * kv_lora * sizeof(bf16)) +
         std::size_t(T) * splits * num_heads * (kv_lora + 2) * sizeof(float);
}

bool mla_split_supported(int kv_lora, int rope, int row_elems) {
  return kv_lora > 0 && kv_lora % 16 == 0 && kv_lora <= kMaxR && rope >= 0 && rope % 2 == 0 &&
         (kv_lora + rope) % 8 == 0 && kv_lora + rope <= kMaxW && row_elems % 8 == 0;
}

void launch_mla_split(cudaStream_t s, const MlaAttnParams &p) {
  const int R = p.kv_lora, H = p.num_heads;
  if (!mla_split_supported(R, p.rope, p.layout.slot_elems()) || p.scratch == nullptr || p.T <= 0 ||
      p.num_splits > kMaxSplits || p.nope > kMaxNope)
    throw Error(ErrorCode::kInvalidArgument,
                "launch_mla_attention (split): kv_lora " + std::to_string(R) + ", rope " +
                    std::to_string(p.rope) + ", cache row " +
                    std::to_string(p.layout.slot_elems()) + ", nope " + std::to_string(p.nope) +
                    ", T " + std::to_string(p.T) + ", splits " + std::to_string(p.num_splits) +
                    (p.scratch ? "" : ", no scratch") + " not taken");
  auto *qa = static_cast<bf16 *>(p.scratch);
  auto *part = reinterpret_cast<float *>(static_cast<char *>(p.scratch) +
                                         align256(std::size_t(p.T) * H * R * sizeof(bf16)));
  const unsigned tok_blocks = static_cast<unsigned>((p.T + kTok - 1) / kTok);
  mla_absorb_kernel<<<dim3(H, tok_blocks), kAuxThreads, kTok * p.nope * sizeof(float), s>>>(p, qa);
  KEEL_CUDA_CHECK_LAUNCH("mla_absorb");
  const std::size_t smem = split_smem_bytes(R, p.rope);
  KEEL_CUDA_CHECK(cudaFuncSetAttribute(
      mla_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(p.num_tiles, (H + kG - 1) / kG, p.num_splits);
  mla_split_kernel<<<grid, kThreads, smem, s>>>(p, qa, part);
  KEEL_CUDA_CHECK_LAUNCH("mla_split");
  mla_combine_kernel<<<dim3(H, tok_blocks), kAuxThreads, 0, s>>>(p, part);
  KEEL_CUDA_CHECK_LAUNCH("mla_combine");
}

}  // namespace keel::cuda
