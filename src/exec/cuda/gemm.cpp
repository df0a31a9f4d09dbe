#include "exec/cuda/gemm.h"

#include <string>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_gemv.h"

namespace keel::cuda {

namespace {
cudaDataType_t cuda_type(GemmType t) {
  switch (t) {
    case GemmType::kBF16:
      return CUDA_R_16BF;
    case GemmType::kF16:
      return CUDA_R_16F;
    case GemmType::kF32:
      return CUDA_R_32F;
  }
  return CUDA_R_32F;
}
}  // namespace

Gemm::~Gemm() {
  for (auto &[key, p] : plans_) {
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  }
}

// Column-major view: row-major W[N,K] is col-major K x N (ld K); row-major x[M,K] is
// col-major K x M; row-major y[M,N] is col-major N x M. So y^T = op_T(W) * x^T.
Gemm::Plan &Gemm::plan_for(const Key &key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [ab_i, out_i, M, N, K, acc] = key;
  const auto ab = static_cast<GemmType>(ab_i), out = static_cast<GemmType>(out_i);
  Plan p;
  KEEL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  KEEL_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
  KEEL_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
  KEEL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, cuda_type(ab), K, N, K));
  KEEL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, cuda_type(ab), K, M, K));
  KEEL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, cuda_type(out), N, M, N));

  cublasLtMatmulPreference_t pref = nullptr;
  KEEL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::size_t ws = ctx_.gemm_workspace_bytes();
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx_.blas_lt(), p.desc, p.a, p.b, p.c,
                                                           p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatmulDescDestroy(p.desc);
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    throw Error(ErrorCode::kUnsupported, "gemm: no cuBLASLt algorithm for M=" + std::to_string(M) +
                                             " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                             (acc ? " (accumulate)" : ""));
  }
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Gemm::run(StreamRef stream_ref, GemmType ab, GemmType out, const void *x, const void *w,
               void *y, std::int64_t M, std::int64_t N, std::int64_t K, bool accumulate) {
  const cudaStream_t stream = stream_ref.get("Gemm::run");
  if (M <= 0 || N <= 0 || K <= 0) return;
  if (M <= gemv_max_m_ && ab == GemmType::kBF16 && out != GemmType::kF16 && !accumulate &&
      gemv_supported(M, K, x, w)) {
    launch_gemv(stream_ref, static_cast<const bf16 *>(x), static_cast<const bf16 *>(w), y,
                out == GemmType::kF32, M, N, K);
    return;
  }
  Plan &p = plan_for({static_cast<int>(ab), static_cast<int>(out), M, N, K, accumulate});
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  KEEL_CUBLAS_CHECK(cublasLtMatmul(ctx_.blas_lt(), p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y,
                                   p.c, &p.algo, ctx_.gemm_workspace(), ctx_.gemm_workspace_bytes(),
                                   stream));
}

}  // namespace keel::cuda
