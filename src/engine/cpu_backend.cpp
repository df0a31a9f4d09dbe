#include "engine/cpu_backend.h"

#include "exec/cpu/cpu_model_runner.h"

namespace keel {

BackendFactory cpu_backend(CpuBackendOptions options) {
  return [options] {
    EngineBackend b;
    b.context = std::make_unique<ExecContext>(options.threads);
    b.runner = cpu::CpuModelRunner::open(options.model, *b.context,
                                         cpu::KvOptions{options.num_blocks, options.block_size});
    return b;
  };
}

}  // namespace keel
