// Warp-wide tensor-core steps. mma_bf16: mma.sync m16n8k16 with bf16 inputs and f32
// accumulators, d += A (16 x 16, row-major fragments a) x B (16 x 8, column fragments b0,
// b1); shared by the flash attention kernel and the fused decode GEMV. mma_s8_k32 /
// mma_s8_k16: integer products of s8 codes, d = A B (no accumulator in: each call's sum is
// scaled on its own), for the quantized GEMV (k_qgemv_mma.cu). Fragments (PTX ISA,
// "Matrix Fragments for mma.m16n8k32" / "mma.m16n8k16 with integer type"), g = lane / 4,
// t = lane % 4: k32 a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..], a[2] = A[g][16+4t..],
// a[3] = A[g+8][16+4t..], b0 = B[4t..4t+3][g], b1 = B[16+4t..][g]; k16 a[0] = A[g][4t..],
// a[1] = A[g+8][4t..], b0 = B[4t..][g]; d[0], d[1] = D[g][2t, 2t+1], d[2], d[3] =
// D[g+8][2t, 2t+1]. Byte i of a register is element i of its run of four.
#pragma once

#include <cstdint>

namespace keel::cuda {

__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_s8_k32(int (&d)[4], const std::uint32_t (&a)[4],
                                           std::uint32_t b0, std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

__device__ __forceinline__ void mma_s8_k16(int (&d)[4], std::uint32_t a0, std::uint32_t a1,
                                           std::uint32_t b0) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%7,%7,%7,%7};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

}  // namespace keel::cuda
