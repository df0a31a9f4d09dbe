#include "exec/cuda/cuda_eagle3_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "exec/arch/eagle3_head.h"
#include "exec/arch/head_output.h"
#include "exec/cuda/bf16_upload.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/cuda_runner_detail.h"
#include "exec/cuda/head_block_pool.h"
#include "exec/cuda/rope_table.h"

namespace keel::cuda {

using runner_detail::bf16_bytes;

namespace {

constexpr std::size_t align4(std::size_t n) { return (n + 3) / 4 * 4; }

}  // namespace

CudaEagle3Head::CudaEagle3Head(const std::filesystem::path &dir, CudaModelRunner &target)
    : ctx_(target.context()), gemm_(ctx_) {
  ctx_.check_owner("CudaEagle3Head");
  ctx_.activate();
  const ModelConfig &tc = target.config();
  // The target's embedding is on the device: the loader reads only its shape.
  TensorView target_embed;
  target_embed.name = "model.embed_tokens.weight";
  target_embed.dtype = DType::kBF16;
  target_embed.shape = {tc.vocab_size, tc.hidden_size};
  const arch::Eagle3Weights w(dir, tc, target_embed);
  cfg_ = w.cfg;
  aux_ = w.aux;
  d2t_ = w.d2t;
  const ModelConfig &c = cfg_.layer;
  H_ = c.hidden_size, NH_ = c.num_heads, G_ = c.num_kv_heads, D_ = c.head_dim;
  I_ = c.intermediate_size, V_ = c.vocab_size, Vd_ = cfg_.draft_vocab_size;
  aux_w_ = w.fc.shape[1], qkv_w_ = (NH_ + 2 * G_) * D_;
  auto unsupported = [](const std::string &why) {
    throw Error(ErrorCode::kUnsupported, "the CUDA EAGLE-3 head: " + why);
  };
  // cuBLASLt's 16-byte rows of bf16, and the paged attention kernel's shapes.
  if (H_ % 8 != 0 || aux_w_ % 8 != 0 || (NH_ * D_) % 8 != 0 || I_ % 8 != 0)
    unsupported(
        "hidden_size, fc's inputs, heads x head_dim and intermediate_size must be "
        "multiples of 8");
  if (D_ > kAttnMaxHeadDim || D_ % 8 != 0)
    unsupported("head_dim " + std::to_string(D_) + " (a multiple of 8, at most " +
                std::to_string(kAttnMaxHeadDim) + ")");
  if (NH_ % G_ != 0 || NH_ / G_ > kAttnMaxRows)
    unsupported("num_attention_heads " + std::to_string(NH_) + " over num_key_value_heads " +
                std::to_string(G_));
  if (Vd_ > (std::int64_t(1) << 31) - 1 || H_ > (1 << 20) || I_ > (1 << 22))
    unsupported("dimensions beyond the int32 launch range");
  tile_q_ = static_cast<int>(std::max<std::int64_t>(1, kAttnMaxRows / (NH_ / G_)));
  eps_ = static_cast<float>(c.rms_norm_eps);
  interleaved_ = c.rope_style == RopeStyle::kInterleaved;
  const RopeTable rope = make_rope_table(c);
  rot_dim_ = static_cast<int>(2 * rope.inv_freq.size());
  mscale_ = rope.mscale;

  const std::int64_t C = kChunk;
  const CudaKvStore &kv = target.kv_store();
  layout_ = KvLayout{1, kv.block_size(), static_cast<int>(G_), static_cast<int>(D_)};
  max_blocks_ = (target.max_model_len() + layout_.block_size - 1) / layout_.block_size;
  const std::size_t ints = 3 * C + 4 * C + max_blocks_ + 4;
  const std::size_t in_bytes = ints * 4 + C * std::max(aux_w_, H_) * sizeof(float);
  try {
    fc_ = DeviceBuffer(bf16_bytes(H_ * aux_w_));
    qkv_ = DeviceBuffer(bf16_bytes(qkv_w_ * 2 * H_));
    o_ = DeviceBuffer(bf16_bytes(H_ * NH_ * D_));
    gate_up_ = DeviceBuffer(bf16_bytes(2 * I_ * H_));
    down_ = DeviceBuffer(bf16_bytes(H_ * I_));
    lm_head_ = DeviceBuffer(bf16_bytes(Vd_ * H_));
    norms_ = DeviceBuffer(bf16_bytes(4 * H_));
    if (w.own_embed) embed_ = DeviceBuffer(bf16_bytes(V_ * H_));
    inv_freq_ = DeviceBuffer(rope.inv_freq.size() * sizeof(float));
    host_in_ = PinnedBuffer(in_bytes);
    dev_in_ = DeviceBuffer(in_bytes);
    aux_bf16_ = DeviceBuffer(bf16_bytes(C * aux_w_));
    e_ = DeviceBuffer(C * H_ * sizeof(float));
    en_ = DeviceBuffer(bf16_bytes(C * H_));
    gn_ = DeviceBuffer(bf16_bytes(C * H_));
    cat_ = DeviceBuffer(bf16_bytes(C * 2 * H_));
    qkv_act_ = DeviceBuffer(bf16_bytes(C * qkv_w_));
    attn_ = DeviceBuffer(bf16_bytes(C * NH_ * D_));
    proj_ = DeviceBuffer(bf16_bytes(C * H_));
    normed_ = DeviceBuffer(bf16_bytes(C * H_));
    gu_ = DeviceBuffer(bf16_bytes(C * 2 * I_));
    act_ = DeviceBuffer(bf16_bytes(C * I_));
    logits_ = DeviceBuffer(C * Vd_ * sizeof(float));
    argmax_scratch_ = DeviceBuffer(argmax_scratch_bytes(kChunk));
    out_ = DeviceBuffer(C * sizeof(std::int32_t) + C * H_ * sizeof(float));
    host_out_ = PinnedBuffer(out_.bytes());
    // The KV pool: as many blocks as the target's pool has (the positions every request
    // can hold at once), at most what a quarter of the free memory holds.
    const std::int64_t block_bytes =
        layout_.block_elems() * static_cast<std::int64_t>(sizeof(bf16));
    pool_blocks_ =
        side_pool_blocks(runner_detail::device_memory().free_now, 4, block_bytes, kv.num_blocks(),
                         "the CUDA EAGLE-3 head: no device memory left for its KV cache");
    pool_ = DeviceBuffer(static_cast<std::size_t>(pool_blocks_ * block_bytes));
  } catch (const Error &) {
    (void)cudaGetLastError();  // a failed allocation's error, which a launch check would see
    throw;
  }
  free_ = std::make_shared<HeadBlockPool>(
      pool_blocks_, layout_.block_elems() * static_cast<std::int64_t>(sizeof(bf16)));

  // The weights, as bf16 (the files' f32 / f16 / bf16 / FP8 values rounded once).
  Bf16Upload up(ctx_);
  up.put(w.fc, fc_);
  up.put(w.wq, qkv_);
  up.put(w.wk, qkv_, NH_ * D_ * 2 * H_);
  up.put(w.wv, qkv_, (NH_ + G_) * D_ * 2 * H_);
  up.put(w.wo, o_);
  up.put(w.w_gate, gate_up_);
  up.put(w.w_up, gate_up_, I_ * H_);
  up.put(w.w_down, down_);
  up.put(w.lm_head, lm_head_);
  if (w.own_embed) up.put(w.embed, embed_);
  embed_table_ = w.own_embed ? embed_.as<bf16>() : target.embedding().as<bf16>();
  std::int64_t at = 0;
  for (const std::vector<float> *n : {&w.input_norm, &w.hidden_norm, &w.post_norm, &w.norm}) {
    up.put(*n, norms_, at);
    at += H_;
  }
  KEEL_CUDA_CHECK(cudaMemcpyAsync(inv_freq_.data(), rope.inv_freq.data(), inv_freq_.bytes(),
                                  cudaMemcpyHostToDevice, ctx_.copy_h2d().get("cudaMemcpyAsync")));
  up.finish();  // the first step's kernels see every weight
  gemm_.set_gemv_max_m(CudaKernelChoices{}.gemv_max_m);  // as the runner's measured default
  for (const DeviceBuffer *b : {&fc_, &qkv_, &o_, &gate_up_, &down_, &lm_head_, &norms_, &embed_})
    weights_bytes_ += static_cast<std::int64_t>(b->bytes());
  for (const DeviceBuffer *b :
       {&pool_, &dev_in_, &aux_bf16_, &e_, &en_, &gn_, &cat_, &qkv_act_, &attn_, &proj_, &normed_,
        &gu_, &act_, &logits_, &argmax_scratch_, &out_, &inv_freq_})
    reserved_bytes_ += static_cast<std::int64_t>(b->bytes());
}

CudaEagle3Head::~CudaEagle3Head() {
  // Buffers must not be freed under running kernels (each step waits for its outputs, but
  // an exception may have left work behind).
  ctx_.drain();
}

std::int32_t CudaEagle3Head::free_blocks() const {
  return static_cast<std::int32_t>(free_->free.size());
}

void CudaEagle3Head::forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) {
  ctx_.check_owner("CudaEagle3Head::forward");
  const auto n = static_cast<std::int64_t>(in.tokens.size());
  arch::check_head_input(cache, in, in.chained ? H_ : aux_w_, V_, "eagle3");  // as the CPU head
  out.hidden.clear();
  out.argmax.clear();
  out.logits.clear();
  if (n == 0) return;
  // Blocks for positions [0, start + n), taken before anything runs.
  const std::vector<std::int32_t> &blocks =
      head_blocks(cache, free_, in.start_pos + n, layout_.block_size, max_blocks_, "eagle3 head");
  ctx_.activate();
  cache.length = in.start_pos + static_cast<std::int32_t>(n);
  out.hidden.resize(static_cast<std::size_t>(n * H_));
  // The rows whose argmax (and logits) are asked for: [head_from, n).
  const std::int64_t head_from = in.first_head_row();
  for (std::int64_t first = 0; first < n; first += kChunk) {
    const std::int64_t m = std::min<std::int64_t>(kChunk, n - first);
    const std::int64_t from = std::clamp<std::int64_t>(head_from - first, 0, m);
    run_chunk(blocks, in, static_cast<int>(first), static_cast<int>(m), static_cast<int>(from),
              out);
  }
}

void CudaEagle3Head::run_chunk(const std::vector<std::int32_t> &blocks, const MtpInput &in,
                               int first, int m, int head_from, MtpOutput &out) {
  const StreamRef s = ctx_.compute();
  const std::int32_t pos0 = in.start_pos + first;
  const std::int64_t width = in.chained ? H_ : aux_w_;
  const int bs = layout_.block_size;
  const int nb = (pos0 + m + bs - 1) / bs;
  const int H = static_cast<int>(H_);

  // Stage: [tokens m][positions m][slots m][tiles 4 x nt][table nb], then 16-byte aligned,
  // [m, width] f32 rows; one copy.
  auto *h = host_in_.as<std::int32_t>();
  std::int32_t *tokens = h, *positions = h + m, *slots = h + 2 * m;
  for (int j = 0; j < m; ++j) {
    const std::int32_t pos = pos0 + j;
    tokens[j] = in.tokens[first + j];
    positions[j] = pos;
    slots[j] = blocks[pos / bs] * bs + pos % bs;
  }
  const std::size_t tiles_at = 3 * std::size_t(m);
  int nt = 0;
  for (int j = 0; j < m; j += tile_q_, ++nt) {
    AttnTile t;
    t.q_start = j;
    t.num_q = std::min(tile_q_, m - j);
    t.pos0 = pos0 + j;
    t.block_offset = 0;
    std::memcpy(h + tiles_at + 4 * nt, &t, sizeof t);
  }
  const std::size_t table_at = tiles_at + 4 * std::size_t(nt);
  std::copy(blocks.begin(), blocks.begin() + nb, h + table_at);
  const std::size_t rows_at = align4(table_at + nb);
  std::memcpy(h + rows_at, in.hidden.data() + first * width, m * width * sizeof(float));
  KEEL_CUDA_CHECK(cudaMemcpyAsync(dev_in_.data(), h, (rows_at + m * width) * sizeof(float),
                                  cudaMemcpyHostToDevice, s.get("eagle3 head: inputs")));
  const auto *d = dev_in_.as<std::int32_t>();
  const std::int32_t *d_tokens = d, *d_positions = d + m, *d_slots = d + 2 * m;
  const auto *d_rows = reinterpret_cast<const float *>(d + rows_at);
  std::int32_t *d_argmax = out_.as<std::int32_t>();
  float *x = reinterpret_cast<float *>(d_argmax + kChunk);  // the residual stream, [m, H] f32
  const bf16 *norms = norms_.as<bf16>();

  // g = fc(aux rows) in f32, or the chained h'; e = input_layernorm(embed(x_{t+1})),
  // gn = hidden_norm(g); the residual is g (gn with norm_before_residual).
  if (in.chained) {
    KEEL_CUDA_CHECK(cudaMemcpyAsync(x, d_rows, m * H_ * sizeof(float), cudaMemcpyDeviceToDevice,
                                    s.get("eagle3 head: chained rows")));
  } else {
    launch_f32_to_bf16(s, d_rows, aux_bf16_.as<bf16>(), m * aux_w_);
    gemm_.run(s, GemmType::kBF16, GemmType::kF32, aux_bf16_.data(), fc_.data(), x, m, H_, aux_w_);
  }
  launch_embedding(s, d_tokens, m, embed_table_, V_, H, e_.as<float>());
  launch_add_rmsnorm(s, nullptr, e_.as<float>(), norms, en_.as<bf16>(), m, H, eps_);
  launch_add_rmsnorm(s, nullptr, x, norms + H_, gn_.as<bf16>(), m, H, eps_);
  if (cfg_.norm_before_residual) launch_bf16_to_f32(s, gn_.as<bf16>(), x, m * H_);
  launch_concat_rows(s, en_.as<bf16>(), gn_.as<bf16>(), m, H, cat_.as<bf16>());  // [e ; gn]

  // Attention over the head's own positions [0, pos], through its paged pool.
  bf16 *qkv = qkv_act_.as<bf16>();
  gemm_.run(s, GemmType::kBF16, GemmType::kBF16, cat_.data(), qkv_.data(), qkv, m, qkv_w_, 2 * H_);
  launch_rope(s, qkv, m, static_cast<int>(qkv_w_), static_cast<int>(NH_), static_cast<int>(G_),
              static_cast<int>(D_), d_positions, inv_freq_.as<float>(), mscale_, interleaved_,
              rot_dim_);
  launch_kv_write(s, qkv, m, static_cast<int>(qkv_w_), static_cast<int>(NH_ * D_),
                  static_cast<int>((NH_ + G_) * D_), d_slots, pool_.as<bf16>(), layout_, 0);
  AttnParams ap;
  ap.qkv = qkv;
  ap.row_stride = static_cast<int>(qkv_w_);
  ap.tiles = reinterpret_cast<const AttnTile *>(d + tiles_at);
  ap.num_tiles = nt;
  ap.tile_q = tile_q_;
  ap.block_table = d + table_at;
  ap.cache = pool_.as<bf16>();
  ap.layout = layout_;
  ap.num_q_heads = static_cast<int>(NH_);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(D_));
  ap.out = attn_.as<bf16>();
  ap.smem_per_block = ctx_.features().smem_per_block;
  launch_paged_attention(s, ap);
  bf16 *proj = proj_.as<bf16>(), *normed = normed_.as<bf16>();
  gemm_.run(s, GemmType::kBF16, GemmType::kBF16, attn_.data(), o_.data(), proj, m, H_, NH_ * D_);
  // x += o_proj; the MLP over post_attention_layernorm(x); x += down: h'. Its norm feeds
  // lm_head.
  launch_add_rmsnorm(s, proj, x, norms + 2 * H_, normed, m, H, eps_);
  gemm_.run(s, GemmType::kBF16, GemmType::kBF16, normed, gate_up_.data(), gu_.data(), m, 2 * I_,
            H_);
  launch_swiglu(s, gu_.as<bf16>(), act_.as<bf16>(), m, static_cast<int>(I_));
  gemm_.run(s, GemmType::kBF16, GemmType::kBF16, act_.data(), down_.data(), proj, m, H_, I_);
  launch_add_rmsnorm(s, proj, x, norms + 3 * H_, normed, m, H, eps_);
  const int R = m - head_from;
  if (R > 0) {
    gemm_.run(s, GemmType::kBF16, GemmType::kF32, normed + head_from * H_, lm_head_.data(),
              logits_.data(), R, Vd_, H_);
    launch_argmax(s, logits_.as<float>(), R, static_cast<int>(Vd_), d_argmax,
                  argmax_scratch_.data(), ctx_.num_sms());
  }

  // One copy back: the argmax, then h' ([kChunk] i32 | [m, H] f32), and the logits when asked.
  const StreamRef d2h = ctx_.copy_d2h();
  computed_.record(s);
  computed_.make_wait(d2h);
  KEEL_CUDA_CHECK(cudaMemcpyAsync(host_out_.data(), out_.data(),
                                  kChunk * sizeof(std::int32_t) + m * H_ * sizeof(float),
                                  cudaMemcpyDeviceToHost, d2h.get("cudaMemcpyAsync")));
  const bool logits = R > 0 && in.want_logits;
  if (logits) {
    const std::size_t bytes = static_cast<std::size_t>(R) * Vd_ * sizeof(float);
    if (host_logits_.bytes() < bytes)  // tests only (MtpInput::want_logits)
      host_logits_ = PinnedBuffer(static_cast<std::size_t>(kChunk) * Vd_ * sizeof(float));
    KEEL_CUDA_CHECK(cudaMemcpyAsync(host_logits_.data(), logits_.data(), bytes,
                                    cudaMemcpyDeviceToHost, d2h.get("cudaMemcpyAsync")));
  }
  copied_.record(d2h);
  copied_.wait(ctx_.wait_timeout(), "eagle3 head: outputs copy");
  const auto *ho = host_out_.as<std::int32_t>();
  std::memcpy(out.hidden.data() + first * H_, ho + kChunk, m * H_ * sizeof(float));
  for (int r = 0; r < R; ++r)
    out.argmax.push_back(static_cast<TokenId>(ho[r] + d2t_[static_cast<std::size_t>(ho[r])]));
  if (logits) {
    const auto *hl = host_logits_.as<float>();
    out.logits.insert(out.logits.end(), hl, hl + static_cast<std::size_t>(R) * Vd_);
  }
}

std::unique_ptr<Eagle3Runner> CudaModelRunner::open_eagle3_head(const std::filesystem::path &dir) {
  ctx_.check_owner("CudaModelRunner::open_eagle3_head");
  if (mla_)
    throw Error(ErrorCode::kUnsupported,
                "multi-head latent attention targets do not return their layers' hidden states "
                "yet");
  auto head = std::make_unique<CudaEagle3Head>(dir, *this);
  const std::int64_t before = hidden_bytes();
  reserve_hidden(static_cast<std::int32_t>(head->aux_layers().size()));
  head->add_reserved_bytes(hidden_bytes() - before);
  return head;
}

}  // namespace keel::cuda
