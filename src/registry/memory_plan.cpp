#include "registry/memory_plan.h"

#include <algorithm>

#include "core/error.h"
#include "formats/gguf.h"

namespace keel {

namespace fs = std::filesystem;

ModelConfig read_model_config(const fs::path &path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "config.json", ec)) return load_hf_config(path);
    for (const auto &f : fs::directory_iterator(path, ec))
      if (f.path().extension() == ".gguf") return config_from_gguf(*GgufFile::open(f.path()));
    throw Error(ErrorCode::kNotFound, path.string() + ": no config.json or .gguf file");
  }
  return config_from_gguf(*GgufFile::open(path));
}

std::int64_t weight_file_bytes(const fs::path &path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return static_cast<std::int64_t>(fs::file_size(path, ec));
  std::int64_t total = 0;
  for (const auto &f : fs::directory_iterator(path, ec)) {
    const auto ext = f.path().extension();
    if (ext == ".safetensors" || ext == ".gguf" || ext == ".bin")
      total += static_cast<std::int64_t>(f.file_size(ec));
  }
  return total;
}

std::int64_t cpu_block_bytes(const ModelConfig &c, std::int64_t block_size) {
  // kv_values_per_token_layer: 2 x kv_heads x head_dim split, or MLA's latent row.
  ModelConfig sized = c;
  if (sized.head_dim <= 0 && sized.num_heads > 0) sized.head_dim = c.hidden_size / c.num_heads;
  return c.num_layers * block_size * kv_values_per_token_layer(sized) *
         static_cast<std::int64_t>(sizeof(float));
}

ModelMemoryPlan plan_model_memory(const ModelConfig &config, std::int64_t weights_bytes,
                                  const MemoryPlanOptions &o) {
  ModelMemoryPlan p;
  p.known = true;
  p.weights_bytes = weights_bytes;
  p.host_tier_bytes = o.host_tier_bytes;
  p.model_context = o.max_model_len > 0 ? o.max_model_len
                                        : std::max<std::int64_t>(config.max_position_embeddings, 0);
  if (o.cuda) {
    // The engine sizes the pool on the device; the runner caps the context.
    p.context_length = std::min(p.model_context, kCudaMaxContext);
    p.rule = "device share";
    return p;
  }
  HostKvInputs in;
  in.block_size = o.block_size;
  in.block_bytes = cpu_block_bytes(config, o.block_size);
  in.context_tokens = p.model_context;
  in.mem_available = o.mem_available;
  in.ram_share = o.ram_share;
  in.budget_share = o.budget_share;
  in.weights_bytes = weights_bytes;
  in.other_bytes = o.host_tier_bytes;
  in.override_ = o.kv;
  const KvPlan kv = plan_host_kv(in);
  p.kv_blocks = kv.blocks;
  p.kv_tokens = kv.tokens();
  p.kv_bytes = kv.bytes();
  p.rule = kv.rule;
  p.refusal = kv.refusal;
  p.context_length = offered_context(p.model_context, p.kv_tokens);
  return p;
}

}  // namespace keel
