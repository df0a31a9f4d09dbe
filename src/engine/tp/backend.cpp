#include "engine/tp/backend.h"

#include "engine/tp/runner.h"

namespace keel::tp {

EngineBackend make_cpu_tp_backend(const CpuTpBackendOptions &o) {
  EngineBackend b;
  const int per_rank = threads_per_rank(o.threads, o.tensor_parallel);
  b.context = std::make_unique<ExecContext>(per_rank);
  TpRunnerOptions r;
  r.model = o.model;
  r.size = o.tensor_parallel;
  r.threads_per_rank = per_rank;
  r.kv = cpu::KvOptions{o.num_blocks, o.block_size};
  r.op_timeout = std::chrono::milliseconds(o.op_timeout_ms);
  r.launch = o.launch;
  r.on_lost = exit_on_group_lost();
  b.runner = std::make_unique<TpCpuRunner>(r, *b.context);
  return b;
}

}  // namespace keel::tp
