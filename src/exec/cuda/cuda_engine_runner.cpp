#include "exec/cuda/cuda_engine_runner.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "core/error.h"

namespace keel::cuda {

int parse_cuda_device(std::string_view spec) {
  const auto bad = [&] {
    return Error(ErrorCode::kInvalidArgument,
                 "--device: expected cuda or cuda:N, got '" + std::string(spec) + "'");
  };
  if (spec == "cuda") return 0;
  if (spec.substr(0, 5) != "cuda:" || spec.size() == 5 || spec.size() > 9) throw bad();
  int n = -1;
  const auto digits = spec.substr(5);
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || n < 0) throw bad();
  return n;
}

std::unique_ptr<OwningCudaRunner> OwningCudaRunner::open(const std::filesystem::path &path,
                                                         int device,
                                                         const CudaRunnerOptions &opts) {
  std::unique_ptr<OwningCudaRunner> r(new OwningCudaRunner());
  CudaContextOptions co;
  co.device = device;
  r->ctx_ = std::make_unique<CudaContext>(co);
  r->runner_ = CudaModelRunner::open(path, *r->ctx_, opts);
  r->opts_ = opts;
  return r;
}

std::unique_ptr<OwningCudaRunner> OwningCudaRunner::random(const ModelConfig &config, int device,
                                                           std::uint64_t seed,
                                                           const CudaRunnerOptions &opts) {
  std::unique_ptr<OwningCudaRunner> r(new OwningCudaRunner());
  CudaContextOptions co;
  co.device = device;
  r->ctx_ = std::make_unique<CudaContext>(co);
  r->runner_ = std::make_unique<CudaModelRunner>(*r->ctx_, config, seed, opts);
  r->opts_ = opts;
  return r;
}

std::unique_ptr<ModelRunner> OwningCudaRunner::open_sibling(const std::filesystem::path &path,
                                                            std::int32_t num_blocks) {
  CudaRunnerOptions opts = opts_;
  opts.block_size = runner_->kv().block_size();
  opts.num_kv_blocks = std::max(num_blocks, 0);
  // This runner's pool took its share of the memory already: the sibling sizes its own
  // from what is left, and never holds more blocks than the target can give sequences.
  const std::int32_t cap = runner_->kv().num_blocks();
  opts.kv_blocks_for = [cap](const DeviceMemory &mem, std::int64_t block_bytes) {
    return side_pool_blocks(mem.free_now, 2, block_bytes, cap,
                            "no device memory left for a second model's KV cache");
  };
  return CudaModelRunner::open(path, *ctx_, opts);
}

}  // namespace keel::cuda
