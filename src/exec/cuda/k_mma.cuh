// One warp-wide tensor-core step, mma.sync m16n8k16 with bf16 inputs and f32 accumulators:
// d += A (16 x 16, row-major fragments a) x B (16 x 8, column fragments b0, b1). Shared by
// the flash attention kernel and the fused decode GEMV.
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

}  // namespace keel::cuda
