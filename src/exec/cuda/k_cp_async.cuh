// Asynchronous global -> shared copies (sm_80+ cp.async) for the kernels that stage tiles
// through shared memory: the MoE grouped GEMMs, the integer GEMM, MLA's split kernel.
#pragma once

namespace keel::cuda::async_copy {

// 16 bytes, cached in L2 only (.cg): both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src));
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

}  // namespace keel::cuda::async_copy
