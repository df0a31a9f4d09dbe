// Paged attention for decode tiles (one query per sequence): the GQA group's G query
// heads against the sequence's keys (the last AttnParams::window of them when set),
// split-K across blocks when the batch is small.
//
// Block = (tile, kv head, split), 4 warps. Each warp takes 32-key chunks of the split's
// range in turn: the warp copies the chunk's K rows to shared memory (cp.async, whole
// rows per instruction), lane l scores key chunk + l for all G heads, the V rows are
// copied into the same space while the warp runs its online softmax, then the P.V update,
// where lanes own head_dim / 32 output dimensions each. The 4 warps' partial results are
// merged through shared memory at the end.
// Registers are sized to the group (template GT for G = 1, 2, 4, 8): held for 8 heads
// with run-time guards the kernel needed 124 registers at head_dim 128 (4 blocks per SM)
// and ran at half the speed on the H200 (other group sizes still take that path, GT 0).
// Staging K and V in shared memory instead of each lane loading its own K row from
// global memory (32 different 128-byte lines per load instruction) and the P.V loop
// loading V rows 8 keys at a time: 8B decode on the H200, 64 seqs 7,384-7,473 ->
// 8,174-8,212 tok/s, 256 seqs 15,040 -> 18,250, batch 1 177 -> 184 (bench/RESULTS.md;
// the direct-load variants were deleted after that measurement).
// Split-K is merged by the last split block of each (tile, kv head) (split_counters): at
// batch 1 the separate combine kernel took 8 us of each 8B layer's ~150 (ncu).
#include <cfloat>
#include <type_traits>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_attention_sink.cuh"
#include "exec/cuda/k_pdl.cuh"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxGroup = 8;  // query heads per kv head held in registers

// K rows of a warp's 32-key chunk go to shared memory by cooperative cp.async (each
// instruction copies 32 / (head_dim / 8) whole rows in 16-byte pieces), then lane l
// scores key l from there: loading its own row straight from global memory, each lane's
// 16-byte load touched a different 128-byte line (32 lines per instruction); the copy
// touches 2-8 per instruction. Once scored, the K rows' space takes the chunk's V rows
// the same way, copied while the softmax runs, and P.V reads them from shared memory (no
// per-key offset shuffle, no chain of dependent global loads).

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
  const auto d = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
}

// Merges the num_splits partial states of (tile, kv head) `slot0` into out for the G
// heads, a warp per head and DPL dimensions per lane (the layout the splits wrote). Lane
// l first loads split l's (m, l) (32 splits per pass), so the weights cost one round trip
// rather than one per split, and the partial outputs' loads are independent of each
// other. The partials come from other blocks: read through L2 (__ldcg), never a stale L1
// line.
template <int DPL>
__device__ void merge_splits(const AttnParams &p, std::int64_t slot0, int G, int kvh,
                             const AttnTile &tile) {
  constexpr int HD = DPL * 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int g = warp; g < G; g += kWarps) {
    float mx = -INFINITY;
    for (int sp = lane; sp < p.num_splits; sp += 32)
      mx = fmaxf(mx, __ldcg(p.partial_ml + ((slot0 + sp) * kAttnMaxRows + g) * 2));
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float lsum = 0.0f, o[DPL] = {};
    if (mx != -INFINITY) {
      for (int sp0 = 0; sp0 < p.num_splits; sp0 += 32) {
        // Lane l's weight for split sp0 + l (0 for an empty split or none).
        float w = 0.0f;
        if (sp0 + lane < p.num_splits) {
          const std::int64_t slot = (slot0 + sp0 + lane) * kAttnMaxRows + g;
          const float ms = __ldcg(p.partial_ml + slot * 2);
          if (ms != -INFINITY) {
            w = __expf(ms - mx);
            lsum += __ldcg(p.partial_ml + slot * 2 + 1) * w;
          }
        }
        const int n = min(32, p.num_splits - sp0);
#pragma unroll 4
        for (int k = 0; k < n; ++k) {
          const float wk = __shfl_sync(0xffffffffu, w, k);
          const float *po = p.partial_o + ((slot0 + sp0 + k) * kAttnMaxRows + g) * HD + lane * DPL;
          if (wk != 0.0f) {
            if constexpr (DPL == 2) {
              const float2 v = __ldcg(reinterpret_cast<const float2 *>(po));
              o[0] += v.x * wk;
              o[1] += v.y * wk;
            } else {
#pragma unroll
              for (int e = 0; e < DPL; e += 4) {
                const float4 v = __ldcg(reinterpret_cast<const float4 *>(po + e));
                o[e] += v.x * wk;
                o[e + 1] += v.y * wk;
                o[e + 2] += v.z * wk;
                o[e + 3] += v.w * wk;
              }
            }
          }
        }
      }
      for (int off = 16; off > 0; off >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
    }
    const float inv = attn_row_scale(mx, lsum, p.sinks, kvh * G + g);
    bf16 *out = p.out + std::int64_t(tile.q_start) * p.num_q_heads * HD +
                std::int64_t(kvh * G + g) * HD + lane * DPL;
#pragma unroll
    for (int e = 0; e < DPL; ++e) out[e] = __float2bfloat16(o[e] * inv);
  }
}

// Shared memory: q [kMaxGroup][HD] f32 | m, l [kWarps][kMaxGroup][2] f32 | a region
// holding the warps' K (then V) rows [kWarps][32][HD + 8] bf16 (the +8 keeps the lanes'
// 16-byte row reads conflict-free) during the key loop and their partial outputs
// [kWarps][kMaxGroup][HD] f32 at the end.
template <int HD>
constexpr std::size_t decode_smem_bytes() {
  const std::size_t o = sizeof(float) * kWarps * kMaxGroup * HD;
  const std::size_t k = sizeof(bf16) * kWarps * 32 * (HD + 8);
  return sizeof(float) * (kMaxGroup * HD + kWarps * kMaxGroup * 2) + (o > k ? o : k);
}

// DPL = head_dim / 32 output dimensions per lane: 2, 4 or 8 (head_dim 64, 128, 256).
// GT > 0: exactly GT query heads per kv head (registers sized to it); 0: any G up to
// kMaxGroup, registers for kMaxGroup (the unused ones still cost occupancy).
template <int DPL, int GT>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(AttnParams p) {
  constexpr int HD = DPL * 32;
  constexpr int GM = GT > 0 ? GT : kMaxGroup;  // query heads held in registers
  constexpr int VEC = HD / 8;                  // 16-byte vectors per key row
  extern __shared__ float smem[];
  __shared__ bool merges;  // this block is the last split of its (tile, kv head)
  wait_for_previous_kernel();
  allow_next_kernel();
  const int nkv = p.layout.num_kv_heads;
  const int G = GT > 0 ? GT : p.num_q_heads / nkv;
  const int tile_idx = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const AttnTile tile = p.tiles[tile_idx];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float *q_s = smem;                           // [G][HD]
  float *ml_s = q_s + kMaxGroup * HD;          // [kWarps][G][2]
  float *o_s = ml_s + kWarps * kMaxGroup * 2;  // [kWarps][G][HD]
  constexpr int KS = HD + 8;                   // K row stride in shared memory (bf16)
  bf16 *k_w = reinterpret_cast<bf16 *>(o_s) + warp * 32 * KS;  // this warp's [32][KS]

  // Keys [k_lo, kv_len): all of them, or the sliding window's last `window`. The splits
  // divide only that range; one left empty (more splits than 32-key chunks) stores
  // m = -inf, l = 0, which the combine pass skips.
  const int kv_len = tile.pos0 + 1;
  const int k_lo = p.window > 0 ? max(0, kv_len - p.window) : 0;
  const int chunk = ((kv_len - k_lo + p.num_splits - 1) / p.num_splits + 31) / 32 * 32;
  const int k_begin = k_lo + split * chunk;
  const int k_end = min(kv_len, k_begin + chunk);
  const std::int64_t q_row = std::int64_t(tile.q_start) * p.row_stride + std::int64_t(kvh) * G * HD;
  for (int idx = threadIdx.x; idx < G * HD; idx += kThreads)
    q_s[idx] = __bfloat162float(p.qkv[q_row + idx]) * p.scale;
  __syncthreads();

  float m[GM], l[GM], acc[GM][DPL];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < DPL; ++e) acc[g][e] = 0.0f;
  }
  const std::int64_t head_off = std::int64_t(kvh) * HD;
  const int bs = p.layout.block_size;
  for (int cbase = k_begin + warp * 32; cbase < k_end; cbase += kWarps * 32) {
    const int key = cbase + lane;
    float s[GM];
#pragma unroll
    for (int g = 0; g < GM; ++g) s[g] = 0.0f;
    // Each lane resolves its key's page once; the row copies take a row's offset from the
    // owning lane by shuffle.
    std::int64_t k_off = 0, v_off = 0;
    if (key < k_end) {
      const std::int32_t block = p.block_table[tile.block_offset + key / bs];
      k_off = p.layout.offset(block, p.layer, 0, key % bs) + head_off;
      v_off = k_off + std::int64_t(bs) * p.layout.slot_elems();
    }
    constexpr int RPI = 32 / VEC;  // rows per copy instruction
    const int sub = lane / VEC, piece = lane % VEC;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int kk = i * RPI + sub;
      const std::int64_t off = __shfl_sync(0xffffffffu, k_off, kk);
      if (cbase + kk < k_end) cp_async16(k_w + kk * KS + piece * 8, p.cache + off + piece * 8);
    }
    cp_async_wait_all();
    __syncwarp();  // every row of the chunk has landed
    const uint4 *kr = reinterpret_cast<const uint4 *>(k_w + lane * KS);
    if (key < k_end) {
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        const uint4 raw = kr[v];
        const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&raw);
        float k8[8];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __bfloat1622float2(h2[e]);
          k8[2 * e] = f.x;
          k8[2 * e + 1] = f.y;
        }
#pragma unroll
        for (int g = 0; g < GM; ++g) {
          if (g < G) {
            const float4 qa = *reinterpret_cast<const float4 *>(q_s + g * HD + v * 8);
            const float4 qb = *reinterpret_cast<const float4 *>(q_s + g * HD + v * 8 + 4);
            s[g] += qa.x * k8[0] + qa.y * k8[1] + qa.z * k8[2] + qa.w * k8[3] + qb.x * k8[4] +
                    qb.y * k8[5] + qb.z * k8[6] + qb.w * k8[7];
          }
        }
      }
    }
    __syncwarp();  // every lane has read its K row
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int kk = i * RPI + sub;
      const std::int64_t off = __shfl_sync(0xffffffffu, v_off, kk);
      if (cbase + kk < k_end) cp_async16(k_w + kk * KS + piece * 8, p.cache + off + piece * 8);
    }
    const int n_keys = min(32, k_end - cbase);
    float pr[GM];
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      if (g < G) {
        const float sc = lane < n_keys ? s[g] : -INFINITY;
        float cmax = sc;
        for (int o = 16; o > 0; o >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
        const float m_new = fmaxf(m[g], cmax);  // finite: the chunk has at least one key
        const float alpha = __expf(m[g] - m_new);
        pr[g] = __expf(sc - m_new);
        float psum = pr[g];
        for (int o = 16; o > 0; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
        l[g] = l[g] * alpha + psum;
        m[g] = m_new;
#pragma unroll
        for (int e = 0; e < DPL; ++e) acc[g][e] *= alpha;
      }
    }
    // P.V: lane owns dimensions [lane * DPL, lane * DPL + DPL) of every head.
    cp_async_wait_all();
    __syncwarp();  // every V row of the chunk has landed
#pragma unroll 8
    for (int kk = 0; kk < n_keys; ++kk) {
      const bf16 *vr = k_w + kk * KS + lane * DPL;
      float vf[DPL];
      if constexpr (DPL == 2) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(vr));
        vf[0] = f.x;
        vf[1] = f.y;
      } else {
        // DPL 4: one 8-byte load; DPL 8: one 16-byte load.
        using Raw = typename std::conditional<DPL == 4, uint2, uint4>::type;
        const Raw raw = *reinterpret_cast<const Raw *>(vr);
        const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
        for (int e = 0; e < DPL / 2; ++e) {
          const float2 f = __bfloat1622float2(h2[e]);
          vf[2 * e] = f.x;
          vf[2 * e + 1] = f.y;
        }
      }
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        if (g < G) {
          const float pk = __shfl_sync(0xffffffffu, pr[g], kk);
#pragma unroll
          for (int e = 0; e < DPL; ++e) acc[g][e] += pk * vf[e];
        }
      }
    }
    __syncwarp();  // rows read before the next chunk's copies
  }

  // Merge the 4 warps' partial softmax states (o_s overlaps the warps' K rows).
  __syncthreads();
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    if (g < G) {
      if (lane == 0) {
        ml_s[(warp * kMaxGroup + g) * 2] = m[g];
        ml_s[(warp * kMaxGroup + g) * 2 + 1] = l[g];
      }
#pragma unroll
      for (int e = 0; e < DPL; ++e) o_s[(warp * kMaxGroup + g) * HD + lane * DPL + e] = acc[g][e];
    }
  }
  __syncthreads();
  for (int g = warp; g < G; g += kWarps) {
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, ml_s[(w * kMaxGroup + g) * 2]);
    float lsum = 0.0f, o[DPL] = {};
    if (mx != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        const float mw = ml_s[(w * kMaxGroup + g) * 2];
        if (mw == -INFINITY) continue;
        const float wt = __expf(mw - mx);
        lsum += ml_s[(w * kMaxGroup + g) * 2 + 1] * wt;
#pragma unroll
        for (int e = 0; e < DPL; ++e) o[e] += o_s[(w * kMaxGroup + g) * HD + lane * DPL + e] * wt;
      }
    }
    const int head = kvh * G + g;
    if (p.num_splits == 1) {
      const float inv = attn_row_scale(mx, lsum, p.sinks, head);
      bf16 *out = p.out + std::int64_t(tile.q_start) * p.num_q_heads * HD +
                  std::int64_t(head) * HD + lane * DPL;
#pragma unroll
      for (int e = 0; e < DPL; ++e) out[e] = __float2bfloat16(o[e] * inv);
    } else {
      // Same partial layout as the general kernel (row r = g for a single query).
      const std::int64_t slot =
          ((std::int64_t(tile_idx) * nkv + kvh) * p.num_splits + split) * kAttnMaxRows + g;
#pragma unroll
      for (int e = 0; e < DPL; ++e) p.partial_o[slot * HD + lane * DPL + e] = o[e];
      if (lane == 0) {
        p.partial_ml[slot * 2] = mx;
        p.partial_ml[slot * 2 + 1] = lsum;
      }
    }
  }
  if (p.num_splits == 1 || !p.split_counters) return;
  // Publish this split's partials, then count it; the block that brings the count to
  // num_splits sees every other split's partials (they were fenced before their add).
  __threadfence();
  __syncthreads();
  unsigned *counter = p.split_counters + std::int64_t(tile_idx) * nkv + kvh;
  if (threadIdx.x == 0) merges = atomicAdd(counter, 1u) == unsigned(p.num_splits - 1);
  __syncthreads();
  if (!merges) return;
  __threadfence();
  merge_splits<DPL>(p, (std::int64_t(tile_idx) * nkv + kvh) * p.num_splits, G, kvh, tile);
  if (threadIdx.x == 0) *counter = 0;  // ready for the next launch (graph replays)
}

template <int DPL, int GT>
void launch_for(cudaStream_t s, const AttnParams &p) {
  constexpr int HD = DPL * 32;
  const std::size_t smem = decode_smem_bytes<HD>();
  if (smem > 48 * 1024)
    KEEL_CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<DPL, GT>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
  // A plain launch: as a programmatic dependent itself it measured slower (bench/RESULTS.md);
  // the kernel still lets the fused GEMV after it launch early (allow_next_kernel).
  const dim3 grid(p.num_tiles, p.layout.num_kv_heads, p.num_splits);
  decode_attention_kernel<DPL, GT><<<grid, kThreads, smem, s>>>(p);
  KEEL_CUDA_CHECK_LAUNCH("decode_attention");
}

// Registers sized to the group when it is one of the common GQA ratios.
template <int DPL>
void launch_group(cudaStream_t s, const AttnParams &p) {
  const int G = p.num_q_heads / p.layout.num_kv_heads;
  switch (G) {
    case 1:
      return launch_for<DPL, 1>(s, p);
    case 2:
      return launch_for<DPL, 2>(s, p);
    case 4:
      return launch_for<DPL, 4>(s, p);
    case 8:
      return launch_for<DPL, 8>(s, p);
    default:
      return launch_for<DPL, 0>(s, p);
  }
}
}  // namespace

bool decode_attention_supported(int num_q_heads, int num_kv_heads, int head_dim) {
  return num_kv_heads > 0 && num_q_heads % num_kv_heads == 0 &&
         num_q_heads / num_kv_heads <= kMaxGroup &&
         (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

void launch_decode_attention(StreamRef s_ref, const AttnParams &p) {
  const cudaStream_t s = s_ref.get("launch_decode_attention");
  if (p.num_tiles <= 0) return;
  const int hd = p.layout.head_dim;
  if (!decode_attention_supported(p.num_q_heads, p.layout.num_kv_heads, hd) || p.num_splits < 1 ||
      p.num_splits > 65535 || (p.num_splits > 1 && (!p.partial_o || !p.partial_ml)))
    throw Error(ErrorCode::kInvalidArgument, "decode_attention: unsupported shape (head_dim " +
                                                 std::to_string(hd) + ", heads " +
                                                 std::to_string(p.num_q_heads) + "/" +
                                                 std::to_string(p.layout.num_kv_heads) + ")");
  switch (hd) {
    case 64:
      launch_group<2>(s, p);
      break;
    case 128:
      launch_group<4>(s, p);
      break;
    default:
      launch_group<8>(s, p);
      break;
  }
  if (p.num_splits > 1 && !p.split_counters) launch_attention_combine(s_ref, p);
}

}  // namespace keel::cuda
