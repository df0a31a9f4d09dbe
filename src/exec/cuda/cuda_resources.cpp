#include "exec/cuda/cuda_resources.h"

#include <string>
#include <thread>

#include "exec/cuda/cuda_check.h"

namespace keel::cuda {

void throw_cuda_error(cudaError_t err, const char *what, const char *file, int line) {
  throw Error(
      err == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
      std::string("cuda: ") + what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
          ") at " + file + ":" + std::to_string(line));
}

void throw_cublas_error(cublasStatus_t st, const char *what, const char *file, int line) {
  throw Error(
      st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
      std::string("cublas: ") + what + ": status " + std::to_string(static_cast<int>(st)) + " at " +
          file + ":" + std::to_string(line));
}

Stream::Stream() { KEEL_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
Stream &Stream::operator=(Stream &&o) noexcept {
  if (this != &o) {
    if (s_) cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}

Event::Event(bool timing) {
  KEEL_CUDA_CHECK(
      cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
Event &Event::operator=(Event &&o) noexcept {
  if (this != &o) {
    if (e_) cudaEventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}
void Event::record(StreamRef stream) {
  KEEL_CUDA_CHECK(cudaEventRecord(e_, stream.get("Event::record")));
}
void Event::make_wait(StreamRef stream) const {
  KEEL_CUDA_CHECK(cudaStreamWaitEvent(stream.get("Event::make_wait"), e_, 0));
}
bool Event::done() const {
  const cudaError_t st = cudaEventQuery(e_);
  if (st == cudaSuccess) return true;
  if (st == cudaErrorNotReady) return false;
  throw_cuda_error(st, "cudaEventQuery", __FILE__, __LINE__);
}
void Event::wait(std::chrono::milliseconds timeout, const char *what) const {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  // Spin briefly (a decode step is ~ms), then back off to short sleeps.
  for (int spins = 0;; ++spins) {
    if (done()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      throw Error(ErrorCode::kTimeout, std::string("cuda: ") + what +
                                           ": device work not finished after " +
                                           std::to_string(timeout.count()) + " ms");
    if (spins < 2000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 20000 ? 20 : 200));
  }
}
float Event::elapsed_ms(const Event &start, const Event &end) {
  float ms = 0;
  KEEL_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, end.e_));
  return ms;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes) KEEL_CUDA_CHECK(cudaMalloc(&p_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}
DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::PinnedBuffer(std::size_t bytes, bool mapped) : bytes_(bytes) {
  if (bytes)
    KEEL_CUDA_CHECK(cudaHostAlloc(&p_, bytes, mapped ? cudaHostAllocMapped : cudaHostAllocDefault));
}
PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}
PinnedBuffer &PinnedBuffer::operator=(PinnedBuffer &&o) noexcept {
  if (this != &o) {
    if (p_) cudaFreeHost(p_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
void *PinnedBuffer::device_ptr() const {
  void *d = nullptr;
  KEEL_CUDA_CHECK(cudaHostGetDevicePointer(&d, p_, 0));
  return d;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace keel::cuda
