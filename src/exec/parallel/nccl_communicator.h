// The GPU data plane of a tensor-parallel group: NCCL collectives on device buffers,
// enqueued on the rank's compute stream. One process per GPU rank; the ranks agree on
// a ncclUniqueId that rank 0 makes and sends over the group's control channel (the
// SocketCommunicator), which also carries each step's commands.
//
// Never hang: the communicator is NCCL's non-blocking kind (config.blocking = 0), so
// no NCCL call waits on a peer; init and synchronize() poll ncclCommGetAsyncError and
// the stream until their deadline, and a dead or stalled peer ends in ncclCommAbort
// and Error(kUnavailable). NVLink SHARP (NVLS) is switched off (NCCL_NVLS_ENABLE=0):
// its multicast objects are not lent on these machines and can wedge init.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>

#include "exec/parallel/communicator.h"
#include "exec/parallel/nccl_api.h"
#include "exec/parallel/socket_communicator.h"

namespace keel::parallel {

struct NcclOptions {
  std::chrono::milliseconds init_timeout{120000};
  std::chrono::milliseconds op_timeout{60000};  // synchronize() and barrier()
};

class NcclCommunicator final : public Communicator {
 public:
  using UniqueId = std::array<char, 128>;
  // Whether NCCL (2.18+) and the CUDA runtime load and a device is present; `why`
  // says what is missing.
  static bool available(std::string *why = nullptr);
  // Made by rank 0 and sent to every rank before they construct their communicator.
  static UniqueId make_unique_id();

  // Joins the group as `rank` of `size` on CUDA device `device`; collectives go on
  // `stream` (a cudaStream_t; null: the communicator makes and owns one). Blocks, up to
  // init_timeout, until every rank has joined.
  NcclCommunicator(int rank, int size, const UniqueId &id, int device, void *stream = nullptr,
                   NcclOptions options = {});
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Enqueued on the stream (device pointers); ordered before later work on it. The
  // sum is complete when synchronize() returns.
  void all_reduce_sum(void *data, std::size_t count, DType dtype) override;
  void broadcast(void *data, std::size_t bytes, int root) override;
  // An all-reduce of one float, then synchronize().
  void barrier() override;
  bool broken() const override { return !broken_why_.empty(); }

  // Waits, up to op_timeout, until the stream has drained; a peer's failure or the
  // deadline aborts the communicator and throws Error(kUnavailable).
  void synchronize();
  void *stream() const { return stream_; }
  int nccl_version() const { return api_->version; }

 private:
  void check(nccl::ncclResult_t r, const char *op);
  // A non-blocking communicator's call may return "in progress": wait it out.
  void settle(nccl::ncclResult_t r, const char *op, std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void fail(const char *op, const std::string &why);

  std::shared_ptr<const nccl::Api> api_;
  int rank_, size_, device_;
  NcclOptions options_;
  nccl::ncclComm_t comm_ = nullptr;
  void *stream_ = nullptr;
  bool owns_stream_ = false;
  float *scratch_ = nullptr;  // [1] on the device, for barrier()
  std::string broken_why_;
};

// Every rank of a group calls this together: rank 0 makes the unique id, the control
// channel carries it to the others (bounded by its op deadline), each joins on
// `device` / `stream`.
std::unique_ptr<NcclCommunicator> join_nccl_group(SocketCommunicator &control, int device,
                                                  void *stream = nullptr, NcclOptions options = {});

}  // namespace keel::parallel
