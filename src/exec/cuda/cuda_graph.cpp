#include "exec/cuda/cuda_graph.h"

#include "exec/cuda/cuda_check.h"

namespace keel::cuda {

GraphExec::~GraphExec() {
  if (g_) cudaGraphExecDestroy(g_);
}

GraphExec &GraphExec::operator=(GraphExec &&o) noexcept {
  if (this != &o) {
    if (g_) cudaGraphExecDestroy(g_);
    g_ = std::exchange(o.g_, nullptr);
  }
  return *this;
}

GraphExec GraphExec::capture(StreamRef stream_ref, const std::function<void()> &enqueue) {
  const cudaStream_t stream = stream_ref.get("GraphExec::capture");
  KEEL_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // a failed capture leaves a sticky launch error behind
    throw;
  }
  KEEL_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  GraphExec exec;
  const cudaError_t err = cudaGraphInstantiate(&exec.g_, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) throw_cuda_error(err, "cudaGraphInstantiate", __FILE__, __LINE__);
  return exec;
}

void GraphExec::launch(StreamRef stream_ref) const {
  const cudaStream_t stream = stream_ref.get("GraphExec::launch");
  KEEL_CUDA_CHECK(cudaGraphLaunch(g_, stream));
}

}  // namespace keel::cuda
