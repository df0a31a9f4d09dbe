#include "exec/cuda/cuda_mtp_layer.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "exec/arch/head_output.h"
#include "exec/arch/weight_binding.h"
#include "exec/cuda/bf16_upload.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_runner_detail.h"
#include "exec/cuda/head_block_pool.h"

namespace keel::cuda {

using runner_detail::bf16_bytes;

namespace {

// The block's config: the target's, one layer, sparse when the layer stores a router (as
// the CPU binds it), never a "shared" DSA layer (the MTP layer has its own indexer).
ModelConfig block_config(const ModelConfig &c, bool sparse) {
  ModelConfig b = c;
  b.num_layers = 1;
  b.tie_word_embeddings = false;
  b.sliding_layers.clear();
  b.moe->sparse_layers = {sparse};
  b.moe->nextn_predict_layers = 0;
  if (b.mla) b.mla->index_shared.clear();
  return b;
}

std::string replace_all(std::string s, const std::string &from, const std::string &to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// Whether the layer's tensor `own` holds exactly the target's `target` (DeepSeek-V3's
// release stores copies of the embedding and the LM head in its MTP layer): then the
// target's device copy serves.
bool same_bytes(const TensorView &own, const TensorView *target) {
  return target && own.dtype == target->dtype && own.shape == target->shape &&
         own.nbytes == target->nbytes && !own.scale.present() && !target->scale.present() &&
         std::memcmp(own.data, target->data, own.nbytes) == 0;
}

}  // namespace

CudaMtpLayer::CudaMtpLayer(CudaModelRunner &target, const ModelWeights &weights)
    : ctx_(target.context()), gemm_(ctx_) {
  ctx_.check_owner("CudaMtpLayer");
  ctx_.activate();
  const ModelConfig &c = target.config();
  arch::require_mtp_layer(c);
  H_ = c.hidden_size, V_ = c.vocab_size;
  eps_ = static_cast<float>(c.rms_norm_eps);
  const std::string p = "model.layers." + std::to_string(c.num_layers) + ".";
  const arch::WeightLookup lookup = [&](const std::string &name) -> std::optional<TensorView> {
    if (const TensorView *t = weights.find(name)) return *t;
    return std::nullopt;
  };
  // The head's own tensors, checked as the CPU checks them.
  const std::vector<float> enorm = arch::need_vector(lookup, p + "enorm.weight", H_);
  const std::vector<float> hnorm = arch::need_vector(lookup, p + "hnorm.weight", H_);
  const std::vector<float> target_norm = arch::need_vector(lookup, "model.norm.weight", H_);
  const TensorView eh_proj = arch::need_tensor(lookup, p + "eh_proj.weight", {H_, 2 * H_});
  arch::need_vector(lookup, p + "shared_head.norm.weight", H_);
  std::optional<TensorView> own_embed, own_head;
  if (lookup(p + "embed_tokens.weight")) {
    own_embed = arch::need_tensor(lookup, p + "embed_tokens.weight", {V_, H_});
    if (same_bytes(*own_embed, weights.find("model.embed_tokens.weight"))) own_embed.reset();
  }
  if (lookup(p + "shared_head.head.weight")) {
    own_head = arch::need_tensor(lookup, p + "shared_head.head.weight", {V_, H_});
    const char *target_head =
        c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    if (same_bytes(*own_head, weights.find(target_head))) own_head.reset();
  }
  borrows_head_ = !own_head;

  const std::size_t C = kChunk;
  try {
    eh_proj_ = DeviceBuffer(bf16_bytes(2 * H_ * H_));
    norms_ = DeviceBuffer(bf16_bytes(3 * H_));
    if (own_embed) embed_ = DeviceBuffer(bf16_bytes(V_ * H_));
    host_in_ = PinnedBuffer(C * sizeof(std::int32_t) + C * H_ * sizeof(float));
    dev_in_ = DeviceBuffer(host_in_.bytes());
    e_ = DeviceBuffer(C * H_ * sizeof(float));
    g_ = DeviceBuffer(C * H_ * sizeof(float));
    en_ = DeviceBuffer(C * bf16_bytes(H_));
    gn_ = DeviceBuffer(C * bf16_bytes(H_));
    cat_ = DeviceBuffer(C * bf16_bytes(2 * H_));
    u_ = DeviceBuffer(C * H_ * sizeof(float));
  } catch (const Error &) {
    (void)cudaGetLastError();  // a failed allocation's error, which a launch check would see
    throw;
  }
  Bf16Upload up(ctx_);
  up.put(eh_proj, eh_proj_);
  up.put(enorm, norms_, 0);
  up.put(hnorm, norms_, H_);
  up.put(target_norm, norms_, 2 * H_);
  if (own_embed) up.put(*own_embed, embed_);
  up.finish();
  embed_table_ = own_embed ? embed_.as<bf16>() : target.embedding().as<bf16>();
  gemm_.set_gemv_max_m(CudaKernelChoices{}.gemv_max_m);  // as the runner's measured default

  // The block: the layer's tensors under the names of a one-layer model's.
  const bool sparse = lookup(moe_router_name(*c.moe, c.num_layers)).has_value();
  const WeightSource renamed = [&](const std::string &name) {
    if (name == "model.norm.weight") return weights.get(p + "shared_head.norm.weight");
    if (name == "lm_head.weight") return weights.get(p + "shared_head.head.weight");
    return weights.get(replace_all(name, "model.layers.0.", p));
  };
  FedInput fed;
  fed.rows = u_.as<float>();
  if (borrows_head_) {
    fed.head = target.lm_head_data();
    fed.head_fmt = target.lm_head_format();
  }
  CudaRunnerOptions o;
  o.block_size = target.kv_store().block_size();
  o.max_batch_tokens = kChunk;
  o.max_seqs = 1;
  o.max_logits_rows = kHeadRows;
  o.max_model_len = target.max_model_len();
  o.dsa_score_bytes = std::int64_t(16) << 20;
  o.cuda_graphs = false;  // eager (see the header)
  // As many blocks as the target's pool (the positions every request can hold at once), at
  // most what a quarter of the free memory holds.
  const std::int32_t cap = target.kv_store().num_blocks();
  o.kv_blocks_for = [cap](const DeviceMemory &mem, std::int64_t block_bytes) {
    return side_pool_blocks(mem.free_now, 4, block_bytes, cap,
                            "the CUDA MTP layer: no device memory left for its KV cache");
  };
  try {
    block_ = std::make_unique<CudaModelRunner>(ctx_, block_config(c, sparse), renamed, o, fed);
    block_->reserve_hidden(1);  // h', so that no step allocates
  } catch (const Error &e) {
    (void)cudaGetLastError();
    // The block names its tensors as layer 0's: say which they are in the files.
    throw Error(e.code(), replace_all(e.what(), "model.layers.0.", p));
  }
  const std::int32_t bs = block_->kv_store().block_size();
  free_ = std::make_shared<HeadBlockPool>(
      block_->kv_store().num_blocks(), static_cast<std::int64_t>(block_->kv_store().block_bytes()));
  max_blocks_ = (target.max_model_len() + bs - 1) / bs;

  weights_bytes_ = static_cast<std::int64_t>(block_->weight_bytes());
  for (const DeviceBuffer *b : {&eh_proj_, &norms_, &embed_})
    weights_bytes_ += static_cast<std::int64_t>(b->bytes());
  reserved_bytes_ =
      std::max<std::int64_t>(
          block_->buffer_bytes() - static_cast<std::int64_t>(block_->weight_bytes()), 0) +
      pool_bytes() + block_->hidden_bytes();
  for (const DeviceBuffer *b : {&dev_in_, &e_, &g_, &en_, &gn_, &cat_, &u_})
    reserved_bytes_ += static_cast<std::int64_t>(b->bytes());
}

CudaMtpLayer::~CudaMtpLayer() {
  // Buffers must not be freed under running kernels (each step waits for its outputs, but
  // an exception may have left work behind).
  ctx_.drain();
}

std::int32_t CudaMtpLayer::pool_blocks() const { return free_->num_blocks; }
std::int32_t CudaMtpLayer::free_blocks() const {
  return static_cast<std::int32_t>(free_->free.size());
}
std::int64_t CudaMtpLayer::pool_bytes() const {
  return static_cast<std::int64_t>(free_->num_blocks) * free_->block_bytes;
}

void CudaMtpLayer::forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) {
  ctx_.check_owner("CudaMtpLayer::forward");
  const auto n = static_cast<std::int64_t>(in.tokens.size());
  arch::check_head_input(cache, in, H_, V_, "mtp");  // as the CPU layer
  out.hidden.clear();
  out.argmax.clear();
  out.logits.clear();
  if (n == 0) return;
  // Blocks for positions [0, start + n), taken before anything runs.
  const std::vector<std::int32_t> &blocks = head_blocks(
      cache, free_, in.start_pos + n, block_->kv_store().block_size(), max_blocks_, "mtp layer");
  ctx_.activate();
  cache.length = in.start_pos + static_cast<std::int32_t>(n);
  out.hidden.resize(static_cast<std::size_t>(n * H_));
  // The rows whose argmax (and logits) are asked for: [head_from, n). A pass holds at most
  // kChunk positions, of which at most kHeadRows head rows.
  const std::int64_t head_from = in.first_head_row();
  for (std::int64_t first = 0, m = 0; first < n; first += m) {
    m = std::min<std::int64_t>(kChunk, n - first);
    m = std::min<std::int64_t>(m, std::max<std::int64_t>(head_from - first, 0) + kHeadRows);
    const std::int64_t from = std::clamp<std::int64_t>(head_from - first, 0, m);
    run_pass(blocks, in, static_cast<int>(first), static_cast<int>(m), static_cast<int>(from), out);
  }
}

void CudaMtpLayer::run_pass(const std::vector<std::int32_t> &blocks, const MtpInput &in, int first,
                            int m, int head_from, MtpOutput &out) {
  const StreamRef s = ctx_.compute();
  const std::int32_t pos0 = in.start_pos + first;
  const int H = static_cast<int>(H_);

  // Stage [tokens kChunk | rows m x H f32]: x_{t+1}, and -1 at position 0, whose embedding
  // row the kernel leaves zero (e = 0 there, as the CPU layer and vLLM mask it). The
  // previous pass waited for its outputs, so its inputs were read.
  auto *h = host_in_.as<std::int32_t>();
  for (int j = 0; j < m; ++j) h[j] = pos0 + j == 0 ? -1 : in.tokens[first + j];
  std::memcpy(h + kChunk, in.hidden.data() + std::int64_t(first) * H_, m * H_ * sizeof(float));
  KEEL_CUDA_CHECK(cudaMemcpyAsync(dev_in_.data(), h, (kChunk + m * H_) * sizeof(float),
                                  cudaMemcpyHostToDevice, s.get("mtp layer: inputs")));
  const auto *d_tokens = dev_in_.as<std::int32_t>();
  auto *d_rows = reinterpret_cast<float *>(dev_in_.as<std::int32_t>() + kChunk);
  const bf16 *enorm = norms_.as<bf16>(), *hnorm = enorm + H_, *target_norm = enorm + 2 * H_;

  // u = eh_proj([enorm(e) ; hnorm(g)]), g = norm(h) in f32 (the target's rows) or h' itself
  // (chained). launch_add_rmsnorm without an addend leaves its f32 input as it was.
  launch_embedding(s, d_tokens, m, embed_table_, V_, H, e_.as<float>());
  launch_add_rmsnorm(s, nullptr, e_.as<float>(), enorm, en_.as<bf16>(), m, H, eps_);
  float *g = d_rows;
  if (!in.chained) {
    g = g_.as<float>();
    launch_rmsnorm_f32(s, d_rows, target_norm, g, m, H, eps_);
  }
  launch_add_rmsnorm(s, nullptr, g, hnorm, gn_.as<bf16>(), m, H, eps_);
  launch_concat_rows(s, en_.as<bf16>(), gn_.as<bf16>(), m, H, cat_.as<bf16>());
  gemm_.run(s, GemmType::kBF16, GemmType::kF32, cat_.data(), eh_proj_.data(), u_.data(), m, H_,
            2 * H_);

  // The decoder block over u at positions [pos0, pos0 + m), its head over the last R rows.
  const int R = m - head_from;
  const std::int32_t bs = block_->kv_store().block_size();
  const std::int32_t nb = (pos0 + m + bs - 1) / bs;
  ForwardBatch b;
  b.tokens.assign(in.tokens.begin() + first, in.tokens.begin() + first + m);
  b.want_hidden = true;
  SequenceSlice q;
  q.start_pos = pos0;
  q.num_tokens = m;
  q.num_blocks = nb;
  q.logits = R > 0 ? SequenceSlice::Logits::kTail : SequenceSlice::Logits::kNone;
  q.num_logits = std::max(R, 1);
  b.seqs.push_back(q);
  b.block_table.assign(blocks.begin(), blocks.begin() + nb);
  if (R > 0 && in.want_logits) {  // tests: the logits come back, the argmax taken here
    ForwardOutput fo;
    block_->forward(b, fo);
    hidden_ = std::move(fo.hidden);
    for (int r = 0; r < R; ++r) {
      const float *row = fo.logits.data() + std::int64_t(r) * V_;
      out.argmax.push_back(static_cast<TokenId>(std::max_element(row, row + V_) - row));
    }
    out.logits.insert(out.logits.end(), fo.logits.begin(), fo.logits.end());
  } else {
    std::vector<TokenId> next;
    block_->forward_greedy(b, next, nullptr, &hidden_);
    out.argmax.insert(out.argmax.end(), next.begin(), next.end());
  }
  std::copy(hidden_.begin(), hidden_.end(), out.hidden.begin() + std::int64_t(first) * H_);
}

void CudaModelRunner::load_mtp() {
  ctx_.check_owner("CudaModelRunner::load_mtp");
  if (mtp_) return;
  arch::require_mtp_layer(config_);  // before reading the files again
  if (source_.empty())
    throw Error(ErrorCode::kUnsupported,
                "cuda runner: the MTP layer is read from the model's files, and this runner was "
                "not opened from a path");
  const auto weights = ModelWeights::open(source_);
  auto layer = std::make_unique<CudaMtpLayer>(*this, *weights);
  const std::int64_t before = hidden_bytes();
  reserve_hidden(1);  // the final hidden state, every step's while drafting
  layer->add_reserved_bytes(hidden_bytes() - before);
  mtp_ = std::move(layer);
}

void CudaModelRunner::mtp_forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) {
  if (!mtp_) throw Error(ErrorCode::kInternal, "cuda runner: mtp_forward before load_mtp");
  mtp_->forward(cache, in, out);
}

std::int64_t CudaModelRunner::mtp_weights_bytes() const { return mtp_ ? mtp_->weights_bytes() : 0; }
std::int64_t CudaModelRunner::mtp_reserved_bytes() const {
  return mtp_ ? mtp_->reserved_bytes() : 0;
}

}  // namespace keel::cuda
