// Asynchronous global -> shared copies (sm_80+ cp.async) for the kernels that stage tiles
// through shared memory: the MoE grouped GEMMs, the integer GEMM, MLA's split kernel.
#pragma once

namespace keel::cuda::async_copy {

// 16 bytes, cached in L2 only (.cg): both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src));
}
// 8 bytes (.ca): both addresses 8-byte aligned.
__device__ __forceinline__ void cp_async8(void *dst, const void *src) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(a), "l"(src));
}
// 4 bytes (.ca: .cg takes only 16): both addresses 4-byte aligned.
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(a), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// The same for a run-time n (0..7; a larger n waits as 7 does): a ring whose depth is a launch
// parameter.
__device__ __forceinline__ void cp_async_wait_upto(int n) {
  switch (n) {
    case 0:
      return cp_async_wait<0>();
    case 1:
      return cp_async_wait<1>();
    case 2:
      return cp_async_wait<2>();
    case 3:
      return cp_async_wait<3>();
    case 4:
      return cp_async_wait<4>();
    case 5:
      return cp_async_wait<5>();
    case 6:
      return cp_async_wait<6>();
    default:
      return cp_async_wait<7>();
  }
}

}  // namespace keel::cuda::async_copy
