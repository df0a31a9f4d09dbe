#include "exec/parallel/nccl_communicator.h"

#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace keel::parallel {

using Clock = std::chrono::steady_clock;

bool NcclCommunicator::available(std::string *why) {
  auto api = nccl::try_load(why);
  if (!api) return false;
  int n = 0;
  if (const nccl::cudaError_t e = api->GetDeviceCount(&n); e != nccl::kCudaSuccess || n < 1) {
    if (why)
      *why = std::string("no CUDA device: ") +
             (e != nccl::kCudaSuccess ? api->CudaGetErrorString(e) : "none found");
    return false;
  }
  return true;
}

NcclCommunicator::UniqueId NcclCommunicator::make_unique_id() {
  auto api = nccl::load();
  nccl::ncclUniqueId id{};
  const nccl::ncclResult_t r = api->GetUniqueId(&id);
  if (r != nccl::kNcclSuccess)
    throw Error(ErrorCode::kUnavailable,
                std::string("nccl: ncclGetUniqueId: ") + api->GetErrorString(r));
  UniqueId out;
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

NcclCommunicator::NcclCommunicator(int rank, int size, const UniqueId &id, int device, void *stream,
                                   NcclOptions options)
    : api_(nccl::load()), rank_(rank), size_(size), device_(device), options_(options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::kInvalidArgument,
                "nccl: rank " + std::to_string(rank) + " of " + std::to_string(size));
  // NVLS needs multicast objects these machines do not lend; set before NCCL reads its
  // environment (at the first init in this process).
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  if (const nccl::cudaError_t e = api_->SetDevice(device); e != nccl::kCudaSuccess)
    throw Error(ErrorCode::kUnavailable, "nccl: cudaSetDevice(" + std::to_string(device) +
                                             "): " + api_->CudaGetErrorString(e));
  if (stream) {
    stream_ = stream;
  } else {
    if (api_->StreamCreate(&stream_) != nccl::kCudaSuccess)
      throw Error(ErrorCode::kUnavailable, "nccl: cudaStreamCreate failed");
    owns_stream_ = true;
  }
  if (api_->Malloc(reinterpret_cast<void **>(&scratch_), sizeof(float)) != nccl::kCudaSuccess) {
    if (owns_stream_) api_->StreamDestroy(stream_);
    throw Error(ErrorCode::kResourceExhausted, "nccl: cudaMalloc of the barrier scratch failed");
  }
  nccl::ncclUniqueId uid{};
  std::memcpy(uid.internal, id.data(), id.size());
  nccl::ncclConfig_t cfg;
  cfg.blocking = 0;
  const auto deadline = Clock::now() + options_.init_timeout;
  try {
    settle(api_->CommInitRankConfig(&comm_, size, uid, rank, &cfg), "ncclCommInitRankConfig",
           deadline);
  } catch (...) {
    api_->Free(scratch_);
    if (owns_stream_) api_->StreamDestroy(stream_);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) {
    // A broken communicator may have a kernel stuck waiting on a dead peer: abort
    // (which also frees it) rather than destroy, which would wait for it.
    if (broken())
      api_->CommAbort(comm_);
    else if (api_->CommDestroy(comm_) != nccl::kNcclSuccess)
      api_->CommAbort(comm_);
  }
  if (!broken()) {
    api_->Free(scratch_);
    if (owns_stream_) api_->StreamDestroy(stream_);
  }
  // Broken: the stream and scratch may still be in use by an aborted kernel; the
  // process is about to end (the group is lost), which returns them.
}

void NcclCommunicator::fail(const char *op, const std::string &why) {
  std::string msg = "nccl rank " + std::to_string(rank_) + ": " + op + ": " + why;
  if (broken_why_.empty()) {
    broken_why_ = msg;
    if (comm_) api_->CommAbort(comm_);
    comm_ = nullptr;
  }
  throw Error(ErrorCode::kUnavailable, msg);
}

void NcclCommunicator::settle(nccl::ncclResult_t r, const char *op, Clock::time_point deadline) {
  while (r == nccl::kNcclInProgress) {
    if (Clock::now() >= deadline) fail(op, "missed the deadline (a rank did not join?)");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (!comm_) break;
    if (api_->CommGetAsyncError(comm_, &r) != nccl::kNcclSuccess) break;
  }
  check(r, op);
}

void NcclCommunicator::check(nccl::ncclResult_t r, const char *op) {
  if (r != nccl::kNcclSuccess && r != nccl::kNcclInProgress) fail(op, api_->GetErrorString(r));
}

void NcclCommunicator::all_reduce_sum(void *data, std::size_t count, DType dtype) {
  if (broken())
    throw Error(ErrorCode::kUnavailable, "nccl: all_reduce on a broken group: " + broken_why_);
  nccl::ncclDataType_t t;
  switch (dtype) {
    case DType::kF32:
      t = nccl::kNcclFloat32;
      break;
    case DType::kBF16:
      t = nccl::kNcclBfloat16;
      break;
    case DType::kF16:
      t = nccl::kNcclFloat16;
      break;
    default:
      throw Error(ErrorCode::kUnsupported, "nccl: all_reduce of " + std::string(dtype_name(dtype)));
  }
  settle(api_->AllReduce(data, data, count, t, nccl::kNcclSum, comm_, stream_), "ncclAllReduce",
         Clock::now() + options_.op_timeout);
}

void NcclCommunicator::broadcast(void *data, std::size_t bytes, int root) {
  if (broken())
    throw Error(ErrorCode::kUnavailable, "nccl: broadcast on a broken group: " + broken_why_);
  if (root < 0 || root >= size_) throw Error(ErrorCode::kInvalidArgument, "nccl: broadcast root");
  settle(api_->Broadcast(data, data, bytes, nccl::kNcclUint8, root, comm_, stream_),
         "ncclBroadcast", Clock::now() + options_.op_timeout);
}

void NcclCommunicator::barrier() {
  all_reduce_sum(scratch_, 1, DType::kF32);
  synchronize();
}

void NcclCommunicator::synchronize() {
  if (broken())
    throw Error(ErrorCode::kUnavailable, "nccl: synchronize on a broken group: " + broken_why_);
  const auto deadline = Clock::now() + options_.op_timeout;
  for (auto pause = std::chrono::microseconds(2);;
       pause = std::min(pause * 2, std::chrono::microseconds(500))) {
    const nccl::cudaError_t e = api_->StreamQuery(stream_);
    if (e == nccl::kCudaSuccess) return;
    if (e != nccl::kCudaErrorNotReady) fail("synchronize", api_->CudaGetErrorString(e));
    nccl::ncclResult_t async = nccl::kNcclSuccess;
    api_->CommGetAsyncError(comm_, &async);
    if (async != nccl::kNcclSuccess && async != nccl::kNcclInProgress)
      fail("synchronize", std::string("a peer failed: ") + api_->GetErrorString(async));
    if (Clock::now() >= deadline)
      fail("synchronize", "missed the deadline (a rank stalled or died?)");
    std::this_thread::sleep_for(pause);
  }
}

std::unique_ptr<NcclCommunicator> join_nccl_group(SocketCommunicator &control, int device,
                                                  void *stream, NcclOptions options) {
  std::string id(sizeof(NcclCommunicator::UniqueId), '\0');
  if (control.rank() == 0) {
    const auto made = NcclCommunicator::make_unique_id();
    std::memcpy(id.data(), made.data(), made.size());
  }
  control.broadcast_message(id, Clock::now() + options.init_timeout);
  if (id.size() != sizeof(NcclCommunicator::UniqueId))
    throw Error(ErrorCode::kInternal, "nccl: a unique id of the wrong size from rank 0");
  NcclCommunicator::UniqueId uid;
  std::memcpy(uid.data(), id.data(), uid.size());
  return std::make_unique<NcclCommunicator>(control.rank(), control.size(), uid, device, stream,
                                            options);
}

}  // namespace keel::parallel
