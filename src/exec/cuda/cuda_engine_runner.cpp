#include "exec/cuda/cuda_engine_runner.h"

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
  return r;
}

}  // namespace keel::cuda
