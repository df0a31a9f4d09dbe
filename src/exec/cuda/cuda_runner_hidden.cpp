// CudaModelRunner's hidden rows (ForwardBatch::want_hidden), as the CPU runner returns
// them (exec/arch/llama.cpp): every token's output of the layers ForwardBatch::hidden_layers
// names, concatenated in that order, or of the last layer (the final hidden state before
// the final norm; MLA models return only this one). The output of layer l is the residual stream
// after it: on the eager path the residual plus the pending o_proj / down_proj output that
// launch_add_rmsnorm folds into the next norm (added here in f32 the same way, so the value is the
// one the next layer reads), on the fused path the residual the epilogues added into. A small
// kernel per named layer writes it into hidden_ as the layer ends; one copy brings the step's rows
// back.
#include <algorithm>
#include <cstring>
#include <string>

#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/cuda_runner_detail.h"

namespace keel::cuda {

void CudaModelRunner::reserve_hidden(std::int32_t layers) {
  if (layers <= hidden_cap_) return;
  ctx_.check_owner("CudaModelRunner::reserve_hidden");
  ctx_.activate();
  // The graphs that write hidden rows hold the old buffer's address.
  for (auto it = graphs_.begin(); it != graphs_.end();)
    it = it->first[9] != 0 ? graphs_.erase(it) : std::next(it);
  const std::size_t bytes = static_cast<std::size_t>(max_tokens_) * H_ * layers * sizeof(float);
  hidden_ = DeviceBuffer();
  try {
    hidden_ = DeviceBuffer(bytes);
  } catch (const std::exception &e) {
    (void)cudaGetLastError();  // the failed allocation's error, which a launch check would see
    hidden_cap_ = 0;
    throw Error(ErrorCode::kResourceExhausted,
                "cuda runner: no device memory for the hidden rows of " + std::to_string(layers) +
                    " layers (" + std::to_string(bytes >> 20) + " MiB): " + e.what());
  }
  // The copy back goes through pinned memory in chunks (a bounded wait each).
  host_hidden_ = PinnedBuffer(std::min<std::size_t>(bytes, std::size_t(32) << 20));
  hidden_cap_ = layers;
}

void CudaModelRunner::prepare_hidden(const ForwardBatch *b) {
  hidden_layers_.clear();
  hidden_key_ = 0;
  if (b == nullptr || !b->want_hidden) return;
  // An MLA model's final hidden state (the MTP layer's input) is the residual stream as any
  // model's; named layers are EAGLE-3's, which refuses MLA targets (not tested there).
  if (mla_ && !b->hidden_layers.empty())
    throw Error(ErrorCode::kUnsupported,
                std::string("cuda runner: ") + arch_name(config_.arch) +
                    ": multi-head latent attention models return only their final hidden state "
                    "on CUDA");
  for (const std::int32_t l : b->hidden_layers)
    if (l < 0 || l >= config_.num_layers)
      throw Error(ErrorCode::kInvalidArgument, "forward batch: hidden_layers names layer " +
                                                   std::to_string(l) + " of " +
                                                   std::to_string(config_.num_layers));
  std::vector<std::int32_t> layers = b->hidden_layers;
  if (layers.empty()) layers.push_back(static_cast<std::int32_t>(config_.num_layers - 1));
  reserve_hidden(static_cast<std::int32_t>(layers.size()));
  auto it = std::find(hidden_sets_.begin(), hidden_sets_.end(), layers);
  if (it == hidden_sets_.end()) it = hidden_sets_.insert(hidden_sets_.end(), layers);
  hidden_key_ = static_cast<std::int32_t>(it - hidden_sets_.begin()) + 1;
  hidden_layers_ = std::move(layers);
}

void CudaModelRunner::capture_hidden(int layer, const bf16 *pending, std::int32_t T) {
  const std::int64_t width = H_ * static_cast<std::int64_t>(hidden_layers_.size());
  for (std::size_t j = 0; j < hidden_layers_.size(); ++j)
    if (hidden_layers_[j] == layer)
      launch_residual_rows(ctx_.compute(), residual_.as<float>(), pending, T, static_cast<int>(H_),
                           hidden_.as<float>() + j * H_, width);
}

void CudaModelRunner::copy_hidden(std::int32_t T, std::vector<float> &out) {
  if (hidden_layers_.empty()) {
    out.clear();
    return;
  }
  // Rows [0, T) of [T, width]: a graph's padding rows come after the batch's.
  const std::size_t n = static_cast<std::size_t>(T) * H_ * hidden_layers_.size();
  out.resize(n);
  const std::size_t chunk = host_hidden_.bytes() / sizeof(float);
  const StreamRef d2h = ctx_.copy_d2h();
  compute_done_.make_wait(d2h);
  for (std::size_t at = 0; at < n; at += chunk) {
    const std::size_t m = std::min(chunk, n - at);
    KEEL_CUDA_CHECK(cudaMemcpyAsync(host_hidden_.data(), hidden_.as<float>() + at,
                                    m * sizeof(float), cudaMemcpyDeviceToHost,
                                    d2h.get("cudaMemcpyAsync")));
    out_copied_.record(d2h);
    out_copied_.wait(ctx_.wait_timeout(), "cuda runner: hidden rows copy");
    std::memcpy(out.data() + at, host_hidden_.data(), m * sizeof(float));
  }
}

}  // namespace keel::cuda
