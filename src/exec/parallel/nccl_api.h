// NCCL and the few CUDA runtime calls its communicator needs, loaded with dlopen at
// run time: keel builds and runs without NCCL (CI has none), and a GPU machine
// provides libnccl.so.2 (the NVIDIA wheel's or the system's). The types below are the
// public, stable C ABI of nccl.h (2.18 and later) and cuda_runtime_api.h, declared
// here so that no header is needed at build time.
//
// Where the libraries are looked for: $KEEL_NCCL_LIBRARY, else "libnccl.so.2" on the
// loader's path; $KEEL_CUDART_LIBRARY, else libcudart.so.13 / .12 / libcudart.so.
#pragma once

#include <climits>
#include <cstddef>
#include <memory>
#include <string>

namespace keel::parallel::nccl {

using ncclResult_t = int;  // 0: success, 7: in progress
constexpr ncclResult_t kNcclSuccess = 0;
constexpr ncclResult_t kNcclInProgress = 7;
using ncclComm_t = struct ncclComm *;
using ncclDataType_t = int;  // 1 uint8, 6 float16, 7 float32, 9 bfloat16
constexpr ncclDataType_t kNcclUint8 = 1, kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclBfloat16 = 9;
using ncclRedOp_t = int;  // 0: sum
constexpr ncclRedOp_t kNcclSum = 0;
struct ncclUniqueId {
  char internal[128];
};
// ncclConfig_t as of NCCL 2.18 (`size` and `version` tell a newer library which
// fields follow); NCCL_CONFIG_INITIALIZER's undefined values are INT_MIN / null.
struct ncclConfig_t {
  std::size_t size = sizeof(ncclConfig_t);
  unsigned int magic = 0xcafebeef;
  unsigned int version = 21800;  // NCCL_VERSION(2, 18, 0)
  int blocking = INT_MIN;
  int cgaClusterSize = INT_MIN;
  int minCTAs = INT_MIN;
  int maxCTAs = INT_MIN;
  const char *netName = nullptr;
  int splitShare = INT_MIN;
};
using cudaStream_t = void *;
using cudaError_t = int;  // 0: success, 600: not ready
constexpr cudaError_t kCudaSuccess = 0, kCudaErrorNotReady = 600;

struct Api {
  // NCCL
  ncclResult_t (*GetVersion)(int *);
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
  ncclResult_t (*AllReduce)(const void *, void *, std::size_t, ncclDataType_t, ncclRedOp_t,
                            ncclComm_t, cudaStream_t);
  ncclResult_t (*Broadcast)(const void *, void *, std::size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  const char *(*GetErrorString)(ncclResult_t);
  // CUDA runtime
  cudaError_t (*GetDeviceCount)(int *);
  cudaError_t (*SetDevice)(int);
  cudaError_t (*Malloc)(void **, std::size_t);
  cudaError_t (*Free)(void *);
  cudaError_t (*Memcpy)(void *, const void *, std::size_t, int kind);  // kind 4: default
  cudaError_t (*StreamCreate)(cudaStream_t *);
  cudaError_t (*StreamDestroy)(cudaStream_t);
  cudaError_t (*StreamQuery)(cudaStream_t);
  const char *(*CudaGetErrorString)(cudaError_t);

  int version = 0;  // NCCL_VERSION_CODE of the loaded library
};

// The loaded API (loaded once per call site that keeps the pointer; the handles stay
// open for the process's life, as a dlopen'd driver library must). Throws
// Error(kUnavailable) saying which library or symbol is missing.
std::shared_ptr<const Api> load();
// Without throwing: nullptr, and `why` says what is missing.
std::shared_ptr<const Api> try_load(std::string *why);

}  // namespace keel::parallel::nccl
