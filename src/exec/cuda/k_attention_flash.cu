// Tensor-core flash attention for prefill chunks over the paged KV cache (causal, GQA,
// sliding window, online softmax), mma.sync m16n8k16 bf16 with f32 accumulation.
//
// A runner tile holds kFlashRows = 64 rows: row r is query token r / G of the tile and q
// head kvh * G + r % G, so the K/V tiles of one kv head serve all G heads. A block takes
// two consecutive tiles x one kv head (below). Keys go through shared memory 64 at a
// time, double-buffered with cp.async (rows of unused positions are zero-filled, so no
// NaN from stale cache bytes can reach P.V). S = Q K^T and O += P V run on the tensor
// cores; P is rounded to bf16 for the second product (as FlashAttention-2 does).
// (A first version, one tile of 4 warps per block, and one with Q in registers and 4
// stages were measured slower on the H200 and removed: bench/RESULTS.md.)
#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_attention_sink.cuh"
#include "exec/cuda/k_mma.cuh"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
constexpr int kWarps = kFlashRows / 16;  // 4
constexpr int kKeys = 64;                // keys per shared-memory tile

__device__ __forceinline__ std::uint32_t smem_addr(const void *p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
  const int n = valid ? 16 : 0;  // 0: zero-fill the 16 bytes
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t *>(&v);
}

// Block = two consecutive runner tiles x one kv head, 8 warps, 128 rows: warps 0-3 own
// the rows of tile 2b, warps 4-7 those of tile 2b + 1. When the second tile continues
// the first in the same sequence (the runner's tiles of one prompt), one pass over the
// keys serves both: each K/V tile fetched from L2 feeds 128 rows instead of 64. Otherwise
// (tiles of two sequences) the block makes one pass per tile, the other half's warps idle.
// Also: K fragments by ldmatrix.x4 (4 8x8 matrices per instruction instead of one 32-bit
// load per mma operand); the mask math only on key tiles that straddle a row's causal
// limit or window edge; block-table lookups once per key rather than per 16 bytes; pairs
// launched last tile first, so the longest blocks (most keys) start in the first wave.
constexpr int kWarps2 = 2 * kWarps;  // 8
constexpr int kThreads2 = kWarps2 * 32;
constexpr int kRows2 = 2 * kFlashRows;  // 128
constexpr int kMaxStages = 2;           // K/V tiles in flight where shared memory allows

template <int HD, int STAGES>
struct FlashSmem2 {
  static constexpr int kStride = HD + 8;
  static constexpr std::size_t kQ = std::size_t(kRows2) * kStride;
  static constexpr std::size_t kKV = std::size_t(kKeys) * kStride;
  static constexpr std::size_t bytes() { return (kQ + 2 * STAGES * kKV) * sizeof(bf16); }
};

// Q fragments are re-read from shared memory by ldmatrix for every key tile, which keeps
// the kernel near 128 registers so 2 blocks (16 warps) fit per SM. STAGES: K/V tiles in
// flight (cp.async ring); 1: each tile loaded, then used (GPUs with 99 KB per block).
template <int HD, int STAGES>
__global__ void __launch_bounds__(kThreads2, 2) flash_attention_kernel2(AttnParams p) {
  using S = FlashSmem2<HD, STAGES>;
  constexpr int LD = S::kStride;
  constexpr int VEC = HD / 8;           // 16-byte chunks per row
  constexpr int KPS = kThreads2 / VEC;  // keys per load sweep
  constexpr int SWEEPS = kKeys / KPS;   // sweeps per key tile
  static_assert(kKeys % KPS == 0, "key tile must be a whole number of sweeps");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16 *q_s = reinterpret_cast<bf16 *>(smem_raw);  // [kRows2][LD]
  bf16 *kv_s = q_s + S::kQ;                        // [STAGES][K | V][kKeys][LD]

  const int nkv = p.layout.num_kv_heads;
  const int G = p.num_q_heads / nkv;
  const int npairs = (p.num_tiles + 1) / 2;
  const int pair = npairs - 1 - static_cast<int>(blockIdx.x);
  const int kvh = blockIdx.y;
  const bool has_b = 2 * pair + 1 < p.num_tiles;
  const AttnTile ta = p.tiles[2 * pair];
  const AttnTile tb = has_b ? p.tiles[2 * pair + 1] : ta;
  const int rows_a = ta.num_q * G, rows_b = has_b ? tb.num_q * G : 0;
  const bool merged = has_b && tb.block_offset == ta.block_offset && tb.pos0 == ta.pos0 + ta.num_q;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int half = warp / kWarps;  // 0: tile a, 1: tile b
  const AttnTile tile = half ? tb : ta;
  const int rows = half ? rows_b : rows_a;
  const int bs = p.layout.block_size;
  const int W = p.window;
  const std::int64_t v_off = std::int64_t(bs) * p.layout.slot_elems();  // V after K in a block

  // Q tiles -> shared memory (rows past each tile's `rows` zero).
  for (int idx = threadIdx.x; idx < kRows2 * VEC; idx += kThreads2) {
    const int R = idx / VEC, c = idx % VEC;
    const int h = R / kFlashRows, r = R % kFlashRows;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < (h ? rows_b : rows_a)) {
      const AttnTile &tq = h ? tb : ta;
      const int token = tq.q_start + r / G, head = kvh * G + r % G;
      v = *reinterpret_cast<const uint4 *>(p.qkv + std::int64_t(token) * p.row_stride +
                                           std::int64_t(head) * HD + c * 8);
    }
    *reinterpret_cast<uint4 *>(q_s + R * LD + c * 8) = v;
  }

  // Keys [kb, kb + kKeys) of the sequence at block_offset; positions >= hi zero-filled.
  auto load_tile = [&](int kb, int hi, int block_offset, int buf) {
    bf16 *dst = kv_s + std::size_t(buf) * 2 * S::kKV;
    const int c = threadIdx.x % VEC;
#pragma unroll
    for (int sw = 0; sw < SWEEPS; ++sw) {
      const int key = threadIdx.x / VEC + sw * KPS;
      const int pos = kb + key;
      const bool valid = pos < hi;
      const bf16 *src = p.cache;  // any valid address when zero-filling
      if (valid) {
        const std::int32_t block = p.block_table[block_offset + pos / bs];
        src =
            p.cache + p.layout.offset(block, p.layer, 0, pos % bs) + std::int64_t(kvh) * HD + c * 8;
      }
      cp_async16(dst + key * LD + c * 8, src, valid);
      cp_async16(dst + S::kKV + key * LD + c * 8, valid ? src + v_off : src, valid);
    }
  };

  // This warp's rows: r0 within its tile, q_s row warp * 16 + r.
  const int r0 = (warp % kWarps) * 16;
  const int qpos0 = tile.pos0 + (r0 + g) / G;
  const int qpos1 = tile.pos0 + (r0 + g + 8) / G;
  const int kv_len = tile.pos0 + tile.num_q;
  const int warp_last_row = min(rows - 1, r0 + 15);
  const int warp_max_pos = warp_last_row >= r0 ? tile.pos0 + warp_last_row / G : -1;
  const int warp_min_pos = tile.pos0 + r0 / G;
  const int warp_below = W > 0 ? tile.pos0 + r0 / G - W : -1;
  const float scale_log2 = p.scale * 1.4426950408889634f;

  // Pass 0 covers tile a (and b when merged); pass 1 tile b alone.
  auto pass_range = [&](int pass, int &lo, int &hi, int &boff) {
    const AttnTile &pt = pass ? tb : ta;
    lo = W > 0 ? max(0, pt.pos0 - W + 1) : 0;
    hi = merged ? tb.pos0 + tb.num_q : pt.pos0 + pt.num_q;
    boff = pt.block_offset;
  };
  const int npass = has_b && !merged ? 2 : 1;
  int lo, hi, boff, n_tiles;
  // Tiles 0 .. STAGES - 2 of a pass in flight (one commit group each, empty past the end).
  auto prologue = [&](int pass) {
    pass_range(pass, lo, hi, boff);
    n_tiles = (hi - lo + kKeys - 1) / kKeys;
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
      if (st < n_tiles) load_tile(lo + st * kKeys, hi, boff, st);
      cp_async_commit();
    }
  };
  prologue(0);
  __syncthreads();  // q_s written

  constexpr int KS = HD / 16;
  float o[HD / 8][4];
#pragma unroll
  for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  // One key tile for this warp's 16 rows; kMask: apply causal / length / window limits.
  auto tile_body = [&](const bf16 *k_s, const bf16 *v_s, int kb, auto mask_tag) {
    constexpr bool kMask = decltype(mask_tag)::value;
    float s[kKeys / 8][4];
    // Lane l addresses row l % 8 of 8x8 matrix l / 8: keys j*8.., dims k2*32 + 8 (l / 8);
    // the 4 registers are the B fragments (b0, b1) of k steps 2 k2 and 2 k2 + 1.
    const bf16 *kaddr = k_s + (lane & 7) * LD + (lane >> 3) * 8;
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int k2 = 0; k2 < KS / 2; ++k2) {
      std::uint32_t a0[4], a1[4];
      {
        // A fragments of rows warp*16.. by ldmatrix.x4: lanes 0-15 rows, 16-31 the +8 dims.
        const bf16 *qaddr = q_s + (warp * 16 + (lane & 15)) * LD + k2 * 32 + (lane >> 4) * 8;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(a0[0]), "=r"(a0[1]), "=r"(a0[2]), "=r"(a0[3])
                     : "r"(smem_addr(qaddr)));
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(a1[0]), "=r"(a1[1]), "=r"(a1[2]), "=r"(a1[3])
                     : "r"(smem_addr(qaddr + 16)));
      }
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j) {
        std::uint32_t b0, b1, b2, b3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                     : "r"(smem_addr(kaddr + j * 8 * LD + k2 * 32)));
        mma_bf16(s[j], a0, b0, b1);
        mma_bf16(s[j], a1, b2, b3);
      }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[j][e] * scale_log2;
        if (kMask) {
          const int key = kb + j * 8 + t * 2 + (e & 1);
          const int qpos = e < 2 ? qpos0 : qpos1;
          const bool masked = key > qpos || key >= kv_len || (W > 0 && key <= qpos - W);
          v = masked ? -INFINITY : v;
        }
        s[j][e] = v;
        mx[e / 2] = fmaxf(mx[e / 2], v);
      }
    float alpha[2], mu[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m[h], mx[h]);
      mu[h] = m_new == -INFINITY ? 0.0f : m_new;  // a row with every key masked so far
      alpha[h] = exp2f(m[h] - mu[h]);
      m[h] = m_new;
      l[h] *= alpha[h];
    }
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - mu[e / 2]);
        l[e / 2] += s[j][e];
      }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      std::uint32_t pa[4];
      pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const bf16 *vrow = v_s + (kk * 16 + (lane & 15)) * LD + (lane >> 4) * 8;
#pragma unroll
      for (int j = 0; j < HD / 8; j += 2) {
        std::uint32_t b0, b1, b2, b3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                     : "r"(smem_addr(vrow + j * 8)));
        mma_bf16(o[j], pa, b0, b1);
        mma_bf16(o[j + 1], pa, b2, b3);
      }
    }
  };

  for (int pass = 0; pass < npass; ++pass) {
    if (pass > 0) {
      __syncthreads();  // every warp is done with the last pass's buffers
      prologue(pass);
    }
    const bool active = merged || half == pass;
    for (int it = 0; it < n_tiles; ++it) {
      const int kb = lo + it * kKeys;
      if constexpr (STAGES == 1) {
        __syncthreads();  // every warp is done with the one buffer
        load_tile(kb, hi, boff, 0);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();  // everyone's copies landed
      } else {
        cp_async_wait<STAGES - 2>();  // tile it has landed (this thread's copies)
        __syncthreads();              // everyone's copies; buffer (it - 1) % STAGES is free
        const int nx = it + STAGES - 1;
        if (nx < n_tiles) load_tile(lo + nx * kKeys, hi, boff, nx % STAGES);
        cp_async_commit();
      }
      const bf16 *k_s = kv_s + std::size_t(it % STAGES) * 2 * S::kKV;
      const bf16 *v_s = k_s + S::kKV;
      if (active && kb <= warp_max_pos && kb + kKeys - 1 > warp_below) {
        // Every key of the tile visible to every row of the warp: no mask math.
        const bool full = kb + kKeys - 1 <= warp_min_pos && (W <= 0 || kb > warp_max_pos - W);
        if (full)
          tile_body(k_s, v_s, kb, std::false_type{});
        else
          tile_body(k_s, v_s, kb, std::true_type{});
      }
    }
  }
  cp_async_wait<0>();  // no copy may land after the block exits

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + g + 8 * h;
    if (r >= rows) continue;
    const int token = tile.q_start + r / G, head = kvh * G + r % G;
    // m is in log2 units here; the sink helper takes natural ones.
    const float inv = attn_row_scale(m[h] * 0.6931471805599453f, l[h], p.sinks, head);
    bf16 *out = p.out + std::int64_t(token) * p.num_q_heads * HD + std::int64_t(head) * HD;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      *reinterpret_cast<__nv_bfloat162 *>(out + j * 8 + t * 2) =
          __floats2bfloat162_rn(o[j][2 * h] * inv, o[j][2 * h + 1] * inv);
  }
}

template <int HD, int STAGES>
void launch_for(cudaStream_t s, const AttnParams &p) {
  const std::size_t smem = FlashSmem2<HD, STAGES>::bytes();
  KEEL_CUDA_CHECK(cudaFuncSetAttribute(flash_attention_kernel2<HD, STAGES>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  const unsigned pairs = static_cast<unsigned>((p.num_tiles + 1) / 2);
  flash_attention_kernel2<HD, STAGES>
      <<<dim3(pairs, p.layout.num_kv_heads), kThreads2, smem, s>>>(p);
  KEEL_CUDA_CHECK_LAUNCH("flash_attention");
}

std::size_t flash_smem_bytes(int hd, int stages) {
  if (hd == 64) return stages == 1 ? FlashSmem2<64, 1>::bytes() : FlashSmem2<64, 2>::bytes();
  return stages == 1 ? FlashSmem2<128, 1>::bytes() : FlashSmem2<128, 2>::bytes();
}
}  // namespace

bool flash_attention_supported(int num_q_heads, int num_kv_heads, int head_dim) {
  return num_kv_heads > 0 && num_q_heads % num_kv_heads == 0 &&
         num_q_heads / num_kv_heads <= kFlashRows && (head_dim == 64 || head_dim == 128);
}

void launch_flash_attention(StreamRef s_ref, const AttnParams &p) {
  const cudaStream_t s = s_ref.get("launch_flash_attention");
  if (p.num_tiles <= 0) return;
  const int hd = p.layout.head_dim, nkv = p.layout.num_kv_heads;
  if (!flash_attention_supported(p.num_q_heads, nkv, hd) ||
      p.tile_q * (p.num_q_heads / nkv) > kFlashRows || p.tile_q < 1)
    throw Error(ErrorCode::kInvalidArgument,
                "flash_attention: unsupported shape (head_dim " + std::to_string(hd) + ", heads " +
                    std::to_string(p.num_q_heads) + "/" + std::to_string(nkv) + ", tile_q " +
                    std::to_string(p.tile_q) + ")");
  std::size_t limit = p.smem_per_block;
  if (limit == 0) {
    int device = 0, optin = 0;
    KEEL_CUDA_CHECK(cudaGetDevice(&device));
    KEEL_CUDA_CHECK(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    limit = static_cast<std::size_t>(optin);
  }
  const int stages = flash_attention_stages(hd, limit);
  if (hd == 64)
    stages == 1 ? launch_for<64, 1>(s, p) : launch_for<64, kMaxStages>(s, p);
  else
    stages == 1 ? launch_for<128, 1>(s, p) : launch_for<128, kMaxStages>(s, p);
}

int flash_attention_stages(int head_dim, std::size_t smem_per_block) {
  if (smem_per_block == 0) return kMaxStages;
  return flash_smem_bytes(head_dim, kMaxStages) <= smem_per_block ? kMaxStages : 1;
}

}  // namespace keel::cuda
