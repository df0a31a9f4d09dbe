// Linear layers through cuBLASLt: y[M,N] = x[M,K] @ W[N,K]^T with W row-major [out, in]
// (the safetensors layout), bf16 or f16 operands, f32 accumulation, output in the
// operand type or f32 (logits). Algorithms are chosen once per shape and cached here,
// per runner: no global cache, so two engines never share state.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "exec/cuda/cuda_context.h"
#include "exec/cuda/k_qgemm.h"
#include "exec/cuda/k_qgemv.h"

namespace keel::cuda {

enum class GemmType : std::uint8_t { kBF16, kF16, kF32 };

class Gemm {
 public:
  explicit Gemm(const CudaContext &ctx) : ctx_(ctx) {}
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  // x: [M, K] (ab), w: [N, K] (ab), y: [M, N] (out). When `accumulate` is set,
  // y += x @ w^T (beta = 1), otherwise y = x @ w^T. Runs on `stream`.
  void run(StreamRef stream, GemmType ab, GemmType out, const void *x, const void *w, void *y,
           std::int64_t M, std::int64_t N, std::int64_t K, bool accumulate = false);

  // bf16 products with M <= m (and no accumulate) go to the GEMV kernel (k_gemv.h) instead
  // of cuBLASLt; 0 (default) keeps every shape on cuBLASLt. m is capped at kGemvMaxM.
  void set_gemv_max_m(int m) { gemv_max_m_ = m; }
  // Which kernel runs run_linear's quantized GEMVs (k_qgemv.h): the default never takes the
  // tensor cores (mma_min_m past kQgemvMaxM) nor streams. Kept here beside gemv_max_m: the
  // runner's one object every linear layer is run through.
  void set_qgemv_choice(const QgemvChoice &c) { qgemv_choice_ = c; }
  const QgemvChoice &qgemv_choice() const { return qgemv_choice_; }
  // run_linear's quantized weights at kQgemvMaxM < M <= m rows take the integer tensor-core
  // GEMM (k_qgemm.h) instead of dequantize + cuBLASLt; the default (kQgemmOff) never does.
  void set_qgemm_max_m(int m) { qgemm_max_m_ = m; }
  int qgemm_max_m() const { return qgemm_max_m_; }
  // Those GEMM steps take the dequantizing bf16 tensor-core GEMM (launch_qgemm_bf16) where
  // every range is a K-quant, the integer one where every range is Q8_0 / Q4_0; off: K-quants
  // dequantize for cuBLASLt.
  void set_qgemm_bf16(bool on) { qgemm_bf16_ = on; }
  bool qgemm_bf16() const { return qgemm_bf16_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, bool>;
  Plan &plan_for(const Key &key);

  const CudaContext &ctx_;
  std::map<Key, Plan> plans_;
  int gemv_max_m_ = 0;
  QgemvChoice qgemv_choice_;
  int qgemm_max_m_ = kQgemmOff;
  bool qgemm_bf16_ = true;
};

}  // namespace keel::cuda
