#include "engine/tp/runner.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "formats/model_weights.h"

namespace keel::tp {

int threads_per_rank(int threads, int size) {
  const int total =
      threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, total / std::max(size, 1));
}

TpCpuRunner::TpCpuRunner(const TpRunnerOptions &o, ExecContext &ctx) {
  // Checked before any process starts: a model that does not split is a clear error.
  std::shared_ptr<ModelWeights> weights = ModelWeights::open(o.model);
  const parallel::ShardPlan plan = parallel::make_shard_plan(weights->config(), 0, o.size);

  TpGroupOptions g;
  g.size = o.size;
  g.launch = o.launch;
  g.op_timeout = o.op_timeout;
  g.load_timeout = o.load_timeout;
  g.on_lost = o.on_lost;
  WorkerConfig base;
  base.model = o.model.string();
  base.threads = o.threads_per_rank > 0 ? o.threads_per_rank : threads_per_rank(0, o.size);
  base.num_blocks = o.kv.num_blocks;
  base.block_size = o.kv.block_size;
  group_ = std::make_unique<TpGroup>(std::move(g), base);

  arch::WeightLookup lookup =
      [w = weights.get()](const std::string &name) -> std::optional<TensorView> {
    if (const TensorView *t = w->find(name)) return *t;
    return std::nullopt;
  };
  local_ = std::make_unique<cpu::CpuModelRunner>(weights->config(), lookup, weights, ctx, o.kv,
                                                 &plan, &group_->comm());
  group_->wait_ready();
}

TpCpuRunner::~TpCpuRunner() {
  local_.reset();  // before the group closes the communicator it points to
}

void TpCpuRunner::forward(const ForwardBatch &batch, ForwardOutput &out) {
  // Validated here, once, so that a bad batch fails this step without ever reaching the
  // workers (they treat any error as fatal).
  local_->model().validate(batch, local_->local_kv());
  group_->guarded([&] {
    message_ = encode_forward(batch);
    group_->comm().broadcast_message(message_, group_->deadline());
    local_->forward(batch, out);
  });
}

// ---------------------------------------------------------------- KV blocks

std::int32_t TpKvStore::num_blocks() const { return runner_.local_->local_kv().num_blocks(); }
std::int32_t TpKvStore::block_size() const { return runner_.local_->local_kv().block_size(); }
std::size_t TpKvStore::block_bytes() const {
  return runner_.local_->local_kv().block_bytes() *
         static_cast<std::size_t>(runner_.group_->size());
}

void TpKvStore::copy_block(std::int32_t src, std::int32_t dst) {
  cpu::CpuKvStore &local = runner_.local_->local_kv();
  if (src < 0 || dst < 0 || src >= local.num_blocks() || dst >= local.num_blocks())
    throw Error(ErrorCode::kInvalidArgument, "kv cache: copy block out of range");
  TpGroup &g = *runner_.group_;
  g.guarded([&] {
    std::string msg = encode_blocks(Command::kCopyBlock, src, dst);
    g.comm().broadcast_message(msg, g.deadline());
  });
  local.copy_block(src, dst);
}

namespace {

// Rows of one block: layers * 2 (K, V) * block_size, each kv_heads * head_dim floats,
// split by rank into contiguous runs of kv_heads / size heads.
struct BlockRows {
  std::size_t rows, local_row_bytes;
};

BlockRows rows_of(const cpu::CpuKvStore &local) {
  const std::size_t row = static_cast<std::size_t>(local.row_floats()) * sizeof(float);
  return {local.block_bytes() / row, row};
}

}  // namespace

void TpKvStore::save_block(std::int32_t block, std::span<std::byte> host_out) {
  cpu::CpuKvStore &local = runner_.local_->local_kv();
  if (host_out.size() != block_bytes())
    throw Error(ErrorCode::kInvalidArgument, "kv cache: save buffer size");
  if (block < 0 || block >= local.num_blocks())
    throw Error(ErrorCode::kInvalidArgument, "kv cache: save block out of range");
  TpGroup &g = *runner_.group_;
  std::vector<std::string> parts = g.guarded([&] {
    std::string msg = encode_blocks(Command::kSaveBlock, block);
    g.comm().broadcast_message(msg, g.deadline());
    std::string mine(local.block_bytes(), '\0');
    local.save_block(block, std::as_writable_bytes(std::span(mine.data(), mine.size())));
    return g.comm().gather(std::move(mine));
  });
  const BlockRows br = rows_of(local);
  const std::size_t n = parts.size();
  for (std::size_t r = 0; r < n; ++r) {
    if (parts[r].size() != local.block_bytes())
      throw Error(ErrorCode::kInternal, "kv cache: a rank's block image has the wrong size");
    for (std::size_t i = 0; i < br.rows; ++i)
      std::memcpy(host_out.data() + (i * n + r) * br.local_row_bytes,
                  parts[r].data() + i * br.local_row_bytes, br.local_row_bytes);
  }
}

void TpKvStore::load_block(std::int32_t block, std::span<const std::byte> host_in) {
  cpu::CpuKvStore &local = runner_.local_->local_kv();
  if (host_in.size() != block_bytes())
    throw Error(ErrorCode::kInvalidArgument, "kv cache: load buffer size");
  if (block < 0 || block >= local.num_blocks())
    throw Error(ErrorCode::kInvalidArgument, "kv cache: load block out of range");
  const BlockRows br = rows_of(local);
  const std::size_t n = static_cast<std::size_t>(runner_.group_->size());
  std::vector<std::string> parts(n, std::string(local.block_bytes(), '\0'));
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < br.rows; ++i)
      std::memcpy(parts[r].data() + i * br.local_row_bytes,
                  host_in.data() + (i * n + r) * br.local_row_bytes, br.local_row_bytes);
  TpGroup &g = *runner_.group_;
  std::string mine = g.guarded([&] {
    std::string msg = encode_blocks(Command::kLoadBlock, block);
    g.comm().broadcast_message(msg, g.deadline());
    return g.comm().scatter(std::move(parts));
  });
  local.load_block(block, std::as_bytes(std::span(mine.data(), mine.size())));
}

}  // namespace keel::tp
