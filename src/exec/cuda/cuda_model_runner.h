// ModelRunner for the Llama family (Llama 2/3.x, Mistral, Qwen2/3) on one CUDA device,
// executing each layer's arch::LayerPlan (exec/arch/layer_plan.h, the sequence the CPU
// forward runs too) with CUDA kernels: bf16 weights resident on the device (GGUF linear
// weights optionally kept in their blocks, quant_linear.h), a paged KV cache (CudaKvStore),
// every forward pass enqueued on the context's compute stream, results returned through
// pinned memory and the d2h copy stream with bounded waits. All buffers are allocated at
// construction, so the hot path never calls cudaMalloc/cudaFree (which synchronise the whole
// device).
//
// One file per concern: cuda_model_runner.cpp (construction, the forward entry points),
// cuda_weight_formats.cpp (which linear weights stay GGUF blocks, quant_linear.h, and the
// routed experts' format, expert_format.h),
// cuda_runner_weights.cpp (weight upload), cuda_runner_buffers.cpp (buffer planning),
// cuda_runner_inputs.cpp (input staging), cuda_attention_plan.h (attention-path choice),
// cuda_runner_graphs.cpp (CUDA graphs), cuda_runner_layers.cpp (the eager layers),
// cuda_runner_fused.cpp (the fused decode path), cuda_runner_moe.cpp (mixture-of-experts
// layers, k_moe.h), cuda_runner_moe_route.cpp (their routing rules and shared expert),
// cuda_runner_mla.cpp / cuda_runner_dsa.cpp (latent attention, GLM-5's indexer),
// cuda_runner_hidden.cpp (hidden rows for drafters that read them), cuda_mtp_layer.h (the
// checkpoint's MTP layer, run as a one-layer runner fed its input rows),
// cuda_kernel_choices.h (which kernel runs which step), cuda_step_profiler.h (profiling),
// cuda_sampling.cpp (device sampling).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/sampling_params.h"
#include "core/tensor_view.h"
#include "exec/arch/layer_plan.h"
#include "exec/cuda/cuda_attention_plan.h"
#include "exec/cuda/cuda_context.h"
#include "exec/cuda/cuda_graph.h"
#include "exec/cuda/cuda_kernel_choices.h"
#include "exec/cuda/cuda_kv_store.h"
#include "exec/cuda/cuda_step_profiler.h"
#include "exec/cuda/expert_format.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/k_mla_attention.h"
#include "exec/cuda/k_moe.h"
#include "exec/cuda/kernels.h"
#include "exec/cuda/quant_linear.h"
#include "exec/model_runner.h"

namespace keel::cuda {

// Device memory as the runner saw it, for sizing its KV pool (CudaRunnerOptions::kv_blocks_for).
struct DeviceMemory {
  std::int64_t total = 0;
  std::int64_t free_at_open = 0;  // before the runner allocated anything
  std::int64_t free_now = 0;      // after weights and buffers, before the KV pool
};

// The blocks of a KV pool beside another model's (a second model, a drafting head): what
// 1 / share of free_bytes holds, at most cap (the target's blocks: the positions its
// sequences can hold at once). Throws Error(kResourceExhausted, refusal) when that is none.
inline std::int32_t side_pool_blocks(std::int64_t free_bytes, int share, std::int64_t block_bytes,
                                     std::int32_t cap, const char *refusal) {
  const std::int64_t fit = block_bytes > 0 ? free_bytes / share / block_bytes : 0;
  const std::int64_t blocks = std::min<std::int64_t>(fit, cap);
  if (blocks <= 0) throw Error(ErrorCode::kResourceExhausted, refusal);
  return static_cast<std::int32_t>(blocks);
}

struct CudaRunnerOptions {
  std::int32_t block_size = 16;
  std::int32_t num_kv_blocks = 0;    // 0: as many as kv_memory_fraction of free memory holds
  double kv_memory_fraction = 0.80;  // of the device memory free after weights and buffers
  // When set, sizes the pool instead of kv_memory_fraction (num_kv_blocks 0): the engine
  // passes kv/kv_sizing.h's rule here. Blocks out for the memory and one block's bytes
  // in; throws to refuse the load.
  std::function<std::int32_t(const DeviceMemory &, std::int64_t block_bytes)> kv_blocks_for;
  std::int32_t max_batch_tokens = 8192;  // tokens per forward pass
  std::int32_t max_seqs = 256;           // sequences per forward pass
  std::int32_t max_logits_rows = 256;    // logits rows per forward pass
  std::int32_t max_model_len = 0;        // 0: max_position_embeddings (capped at 131072)
  // DSA (glm_moe_dsa): device scratch for the indexer's scores, rows of max_model_len
  // floats; a step's queries are scored in passes of as many rows as it holds (at least
  // one, at most max_batch_tokens).
  std::int64_t dsa_score_bytes = std::int64_t(64) << 20;
  bool profile = false;  // time GEMM / attention / other kernels with events (slower)
  // Decode-only steps (one token per sequence) replay a CUDA graph captured per batch
  // bucket and split-K factor; prefill and mixed steps run eagerly. Off: always eager.
  bool cuda_graphs = true;
  // Prefill tiles on the tensor cores (head_dim 64/128); off: the general CUDA-core kernel.
  bool flash_attention = true;
  // The fused kernels are launched with programmatic dependent launch (Hopper PDL): each
  // starts streaming its weights while the kernel before it drains. Off: plain launches.
  bool programmatic_launch = true;
  // Scratch for forward_sample (about 4 x max_logits_rows x vocab x 4 bytes: 525 MB for
  // 256 rows of a 128k vocabulary). `keel engine --device cuda` turns it on.
  bool gpu_sampling = false;
  // GGUF Q8_0 / Q4_0 / Q4_K / Q6_K linear weights stay in their block format on the
  // device (quant_linear.h: less memory) or are dequantized to bf16 at load (faster on the
  // float GEMV: H200, 8B Q4_K_M batch-1 decode 173 vs 208 tok/s, prefill 512 22,767 vs
  // 37,625; see bench/RESULTS.md; the integer-dot GEMV that decode now uses is not measured
  // yet). kAuto keeps them quantized only when the bf16 form would not fit
  // (keep_quantized_auto).
  QuantizedWeights quantized_weights = QuantizedWeights::kAuto;
  // The random-weights constructor only: routed experts stacked in MXFP4 (gpt-oss's
  // release format) instead of bf16, as a model file with MXFP4 experts loads.
  bool random_experts_mxfp4 = false;
  // Which kernel runs which step: the measured defaults, which cuda_bench and the tests
  // change to compare kernel variants (cuda_kernel_choices.h).
  CudaKernelChoices kernels;
};

// launch_sample's row for `row` (the index names it in errors), its penalty entries --
// the prompt's distinct tokens when repetition-penalised, the generated ones with their
// counts, all inside [0, vocab) -- appended to `entries`. Throws Error(kInvalidArgument)
// on parameters out of range or u outside [0, 1).
SampleRow to_sample_row(const DeviceSampleRow &row, std::int64_t vocab, std::size_t index,
                        std::vector<PenaltyEntry> &entries);

// Returns the named tensor (HF name); throws if absent. ModelWeights::get fits here.
using WeightSource = std::function<TensorView(const std::string &hf_name)>;

// A runner of decoder layers fed rows instead of token embeddings (the MTP layer's block,
// cuda_mtp_layer.h): every step copies its T rows from `rows` ([max_batch_tokens, H] f32 on
// the device, which the caller writes on the compute stream before the step) into the
// residual stream; it holds no embedding. `head`, when set, is another runner's LM head
// ([V, H] laid out as `head_fmt`), read in place of an lm_head.weight of its own and not
// counted in weight_bytes.
struct FedInput {
  const float *rows = nullptr;
  const void *head = nullptr;
  LinearLayout head_fmt;
};

class CudaMtpLayer;

class CudaModelRunner : public ModelRunner {
 public:
  // Uploads the weights named by `weights` (bf16, f16 or f32 on the host; stored bf16).
  CudaModelRunner(CudaContext &ctx, ModelConfig config, const WeightSource &weights,
                  const CudaRunnerOptions &opts);
  // ... fed its rows (FedInput; `fed.rows` must be set).
  CudaModelRunner(CudaContext &ctx, ModelConfig config, const WeightSource &weights,
                  const CudaRunnerOptions &opts, const FedInput &fed);
  // Pseudo-random bf16 weights made on the device (benchmarks, tests): no host copy.
  CudaModelRunner(CudaContext &ctx, ModelConfig config, std::uint64_t seed,
                  const CudaRunnerOptions &opts);
  ~CudaModelRunner() override;
  // Opens an HF model directory or GGUF file (ModelWeights) and uploads its weights;
  // the host mapping is released once they are on the device.
  static std::unique_ptr<CudaModelRunner> open(const std::filesystem::path &path, CudaContext &ctx,
                                               const CudaRunnerOptions &opts);

  const ModelConfig &config() const override { return config_; }
  KvBlockStore &kv() override { return *kv_; }
  void forward(const ForwardBatch &batch, ForwardOutput &out) override;

  // Greedy decoding helper: argmax of each logits row on the device; only the token ids
  // come back (no logits copy). next[i] belongs to the i-th requested row. With `hidden`,
  // also the hidden rows ForwardBatch::want_hidden asks for (as ForwardOutput::hidden).
  void forward_greedy(const ForwardBatch &batch, std::vector<TokenId> &next,
                      std::vector<std::int32_t> *row_seq = nullptr,
                      std::vector<float> *hidden = nullptr);
  // Samples every requested logits row on the device (launch_sample, the CPU Sampler's
  // semantics): only the tokens and their raw-logit logprobs come back, not the logits.
  // Needs CudaRunnerOptions::gpu_sampling.
  bool samples_on_device() const override { return sample_scratch_.bytes() != 0; }
  // A verify (SequenceSlice::Logits::kTail) is a ragged slice of 1 + k tokens like a
  // prefill chunk; its rows are logits rows like any other (eager: graphs are captured
  // for one-token decodes only).
  bool verifies_drafts() const override { return true; }
  std::int32_t max_logits_rows() const override { return max_rows_; }
  // ... applying the rows' structured-output masks there (one upload per step).
  bool masks_on_device() const override { return sample_scratch_.bytes() != 0; }
  void forward_sample(const ForwardBatch &batch, std::span<const DeviceSampleRow> rows,
                      ForwardOutput &out) override;

  CudaKvStore &kv_store() { return *kv_; }
  // Hidden rows (ForwardBatch::want_hidden; forward and forward_sample return them as the
  // CPU runner does, cuda_runner_hidden.cpp) are written on the device into one buffer of
  // [max_batch_tokens, hidden x layers] f32 and copied back once a step. A drafter that
  // reads them reserves room for rows of `layers` hidden states when it opens, so no step
  // allocates; a forward that asks for more first allocates there. Throws
  // Error(kResourceExhausted) when the device cannot hold it.
  void reserve_hidden(std::int32_t layers);
  std::int64_t hidden_bytes() const { return static_cast<std::int64_t>(hidden_.bytes()); }
  CudaContext &context() const { return ctx_; }
  std::int32_t max_model_len() const { return max_model_len_; }
  // The EAGLE-3 head on this device and stream (cuda_eagle3_head.h); it reserves the hidden
  // rows of its aux layers here. MLA models refuse by name.
  std::unique_ptr<Eagle3Runner> open_eagle3_head(const std::filesystem::path &dir) override;
  // The checkpoint's MTP layer on this device and stream (cuda_mtp_layer.h), its tensors
  // read again from the files this runner was opened from; it reserves the final hidden
  // rows here. Refuses by name a model without one, or a runner not opened from a path.
  void load_mtp() override;
  void mtp_forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) override;
  std::int64_t mtp_weights_bytes() const override;
  std::int64_t mtp_reserved_bytes() const override;
  // The token embedding on the device ([vocab, hidden] bf16): a drafting head without its
  // own reads it (cuda_eagle3_head.h, cuda_mtp_layer.h).
  const DeviceBuffer &embedding() const { return embed_; }
  // The LM head on the device ([vocab, hidden] as lm_head_format() lays it out; the
  // embedding when tied): the MTP layer without its own reads it.
  const void *lm_head_data() const;
  const LinearLayout &lm_head_format() const { return lm_head_fmt_; }
  // Milliseconds of device time per phase summed over steps since the last call (only
  // with CudaRunnerOptions::profile): {gemm, attention, other}.
  std::array<double, 3> take_profile() { return profiler_.take(); }
  std::size_t weight_bytes() const { return weight_bytes_; }
  // Device memory this runner allocated before its KV pool (weights, activations,
  // sampler workspace), as measured when the pool was sized.
  std::int64_t buffer_bytes() const { return buffer_bytes_; }
  std::int64_t device_total_bytes() const { return device_total_; }
  std::size_t graphs_captured() const { return graphs_.size(); }
  // Largest step (token rows) that runs on the fused decode kernels; 0: none.
  int fused_decode_max_m() const { return fused_max_m_; }
  // Low-bit experts above the GEMV bound on launch_moe_grouped_gemm_lowbit (tests).
  bool moe_lowbit_gemm() const { return moe_lowbit_gemm_; }
  // What the linear weights are on the device: "bf16", "q4_k+q6_k", ...
  std::string weight_format() const override;

 private:
  struct Layer {
    DeviceBuffer input_norm;  // [H]
    DeviceBuffer qkv;         // [(nh + 2 nkv) hd, H]: q, k, v rows stacked
    DeviceBuffer qkv_bias;    // [(nh + 2 nkv) hd] (qwen2), else empty
    DeviceBuffer q_norm;      // [hd] (qwen3), else empty
    DeviceBuffer k_norm;      // [hd] (qwen3), else empty
    DeviceBuffer o;           // [H, nh hd]
    DeviceBuffer post_norm;   // [H]
    DeviceBuffer gate_up;     // [2 I, H]: gate rows then up rows
    DeviceBuffer down;        // [H, I]
    // Attention and routing extras (GLM-4.5, gpt-oss), empty when the config has none:
    DeviceBuffer o_bias;          // [H] (attention_out_bias)
    DeviceBuffer sinks;           // [nh] f32 (attention_sinks)
    DeviceBuffer router_bias;     // [E] f32: e_score_correction_bias or the router logit bias
    DeviceBuffer shared_gate_up;  // [2 S, H]: the shared expert's gate rows, then up rows
    DeviceBuffer shared_down;     // [H, S]
    // Device formats of qkv, o, gate_up, down (bf16 unless kept quantized).
    LinearLayout qkv_fmt, o_fmt, gate_up_fmt, down_fmt;
    // A mixture-of-experts layer (exec/arch/moe_ffn.h) has these instead of gate_up, down
    // (Ie: the experts' intermediate size), stacked per layer in expert_format_ (bf16, GGUF
    // blocks, FP8 or MXFP4; expert_format.h says where expert e's matrices lie):
    DeviceBuffer router;           // [E, H] bf16
    DeviceBuffer experts_gate_up;  // [E, 2 Ie, H]: each expert's gate rows, then its up rows
    DeviceBuffer experts_down;     // [E, H, Ie]
    // gpt-oss's expert biases (MoeConfig::expert_bias), f32; else empty.
    DeviceBuffer experts_gate_up_bias;  // [E, 2 Ie]: each expert's gate bias, then its up bias
    DeviceBuffer experts_down_bias;     // [E, H]
    // Multi-head latent attention (deepseek_v3; cuda_runner_mla.cpp) instead of qkv, q/k
    // norms and biases; o is o_proj [H, nh v]. bf16 (o_fmt as planned):
    DeviceBuffer mla_q_a;        // [q_lora, H] (q_lora_rank > 0)
    DeviceBuffer mla_q_a_norm;   // [q_lora]
    DeviceBuffer mla_q;          // q_b_proj [nh qk, q_lora] or q_proj [nh qk, H]
    DeviceBuffer mla_kv_a;       // kv_a_proj_with_mqa [kv_lora + rope, H]
    DeviceBuffer mla_kv_a_norm;  // [kv_lora]
    DeviceBuffer mla_kv_b;       // kv_b_proj [nh (nope + v), kv_lora], read by the kernel
    LinearLayout mla_q_a_fmt, mla_q_fmt, mla_kv_a_fmt;  // bf16 [N, K]
    // DSA's indexer (glm_moe_dsa; k_dsa_indexer.h), in the layers that select (not the
    // "shared" ones), else empty:
    DeviceBuffer dsa_wq_b;     // indexer.wq_b [Hi Di, q_lora]
    DeviceBuffer dsa_wk_proj;  // indexer.wk [Di, H], then indexer.weights_proj [Hi, H]
    DeviceBuffer dsa_k_norm;   // [2, Di] f32: indexer.k_norm weight, then bias
    LinearLayout dsa_wq_b_fmt, dsa_wk_proj_fmt;  // bf16 [N, K]
  };
  // Where one pass's staged inputs live in dev_in_ and how attention is split: all a
  // pass's launches depend on this alone (so a graph captured for it can be replayed).
  struct StepShape {
    std::int32_t T = 0;                          // token rows (padded for graphs)
    int R = 0;                                   // logits rows (padded for graphs)
    int n_single = 0, n_multi = 0, n_flash = 0;  // decode, general, then flash tiles
    std::size_t tiles_at = 0, table_at = 0;      // i32 offsets in dev_in_
    int splits_single = 1, splits_multi = 1;
    // The split-K factors of the layers with AttentionPathConfig::narrow_window.
    int splits_single_narrow = 1, splits_multi_narrow = 1;
    // MLA: the split path's factor (launch_mla_attention's num_splits); 0: the simple
    // kernel (steps of more than mla_split_rows_ token rows, or shapes it does not take).
    int splits_mla = 0;
    // MLA over mla_split_rows_ rows (CudaKernelChoices::mla_prefill_chunks): i32 offset in
    // dev_in_ of one single-query tile a token row, q_start relative to its chunk of
    // mla_split_rows_ rows (launch_mla_attention_block runs the split path chunk by
    // chunk); 0: none.
    std::size_t mla_chunk_tiles_at = 0;
  };

  void stage_masks(std::span<const DeviceSampleRow> rows, int R);  // cuda_sampling.cpp
  void validate_config() const;
  // cuda_runner_weights.cpp
  // Chooses each linear weight's device format from the file's dtypes (before allocation).
  void plan_weight_formats(const WeightSource &weights, QuantizedWeights mode);
  void allocate_weights();
  void upload_weights(const WeightSource &weights);
  void randomize_weights(std::uint64_t seed);
  void allocate_buffers(const CudaRunnerOptions &opts);  // cuda_runner_buffers.cpp
  // Validates and stages the batch, enqueues the whole pass; returns the logits rows.
  // `hidden`: write the hidden rows the batch asks for (ForwardBatch::want_hidden).
  int enqueue(const ForwardBatch &batch, std::vector<std::int32_t> &row_seq,
              std::vector<std::int32_t> &row_pos, bool hidden);
  // cuda_runner_hidden.cpp: checks the layers `batch` asks for (null: none) and makes them
  // this step's (hidden_layers_, hidden_key_); capture_hidden, at the end of each layer in
  // launch_step, writes the residual stream after it (with the pending add, when the
  // eager path has not folded it in yet) into the columns of the slots that name it;
  // copy_hidden, after compute_done_ is recorded, brings this step's T rows back.
  void prepare_hidden(const ForwardBatch *batch);
  void capture_hidden(int layer, const bf16 *pending, std::int32_t T);
  void copy_hidden(std::int32_t T, std::vector<float> &out);
  // cuda_runner_inputs.cpp: checks the batch against the runner's limits, writes its
  // inputs and attention tiles to host_in_ and copies them to dev_in_ on compute.
  // `graph`: pad a decode-only batch to its graph bucket. Returns the shape; `rows` the
  // logits rows that belong to the batch (the shape's R may be padded).
  StepShape stage_inputs(const ForwardBatch &batch, bool graph, std::vector<std::int32_t> &row_seq,
                         std::vector<std::int32_t> &row_pos, int &rows);
  // cuda_runner_graphs.cpp: a decode-only step replays the graph captured for its shape
  // (captured on first use); any other step launches eagerly.
  bool graph_eligible(const ForwardBatch &batch) const;
  std::int32_t graph_bucket(std::int32_t n) const;  // padded size of an n-sequence decode
  void run_step(const StepShape &shape, bool graph);
  // cuda_runner_layers.cpp: every kernel of one pass, on compute; the layers of a step of
  // few rows go to launch_fused_layers (cuda_runner_fused.cpp, k_decode_fused.h).
  void launch_step(const StepShape &shape);
  void launch_fused_layers(const StepShape &shape, AttnParams ap, AttnParams ap_multi,
                           AttnParams ap_flash);
  // cuda_runner_moe.cpp: proj_ = the MoE block of layer L over normed_'s T rows.
  void allocate_moe_buffers(const CudaRunnerOptions &opts);
  bool moe_gemv_path(std::int32_t T) const { return T <= moe_gemv_max_; }
  // The GEMM path's row tile (groups' padding) for a step of S slots, and its grouped rows.
  int gemm_tile_rows(std::int64_t S) const;
  std::int64_t gemm_rows_cap(std::int64_t S) const;
  void launch_moe(const Layer &L, std::int32_t T);
  // The fused decode path's MoE block (k_moe_decode.h): residual_ += the block over its T rows.
  void launch_moe_decode(const Layer &L, std::int32_t T);
  // Layer L's expert biases and the config's clamped SwiGLU, as the expert kernels take them.
  MoeExpertAct expert_act(const Layer &L) const;
  // The decode, general and flash launches' parameters for a staged step (layer 0).
  void attention_params(const StepShape &shape, AttnParams &single, AttnParams &multi,
                        AttnParams &flash) const;
  // Points the three launches' parameters at layer `layer`: its KV, window, split-K
  // factors (the shape's for its window) and sinks.
  void set_attention_layer(const StepShape &shape, int layer, AttnParams &single, AttnParams &multi,
                           AttnParams &flash) const;
  // The sliding window of layer `layer` (ModelConfig's; 0: none), capped to int.
  int layer_window(std::int64_t layer) const;
  // cuda_runner_moe_route.cpp: the router's rule (k_moe_route.h) over logits [T, E] into
  // ids, weights [T, k]; the shared expert's scratch, and its MLP added into proj_.
  void launch_moe_router(const Layer &L, std::int32_t T, const float *logits, std::int32_t *ids,
                         float *weights);
  void allocate_moe_shared_buffers();
  void launch_moe_shared(const Layer &L, std::int32_t T);
  // cuda_runner_mla.cpp: proj_ = layer L's latent attention over normed_'s T rows (the
  // kQkvProj step of an MLA layer stands for the whole block, o_proj included); its
  // scratch and the latent cache layout (its weights: cuda_runner_weights.cpp). MLA models
  // run eagerly (no fused path, no graphs).
  // An MLA layer's steps: input norm, kQkvProj (the latent attention block), residual add,
  // post norm, the MLP or the experts, residual add (arch::layer_plan has none for MLA).
  arch::LayerPlan mla_layer_plan(std::int64_t layer) const;
  void allocate_mla_buffers(const CudaRunnerOptions &opts);
  KvLayout mla_kv_layout(std::int32_t block_size) const;
  void launch_mla_attention_block(const Layer &L, int layer, const StepShape &shape);
  // DSA (cuda_runner_dsa.cpp): layer L's index keys into the latent rows, then each
  // query's selection into dsa_sel_ (scored in passes of dsa_rows_ queries).
  void allocate_dsa_buffers(const CudaRunnerOptions &opts);
  void launch_dsa_indexer(const Layer &L, int layer, const StepShape &shape, const MlaRope &rp);

  CudaContext &ctx_;
  ModelConfig config_;
  Gemm gemm_;
  FedInput fed_;                       // rows instead of the embedding (the MTP layer's block)
  std::filesystem::path source_;       // what open() read (load_mtp reads it again)
  std::unique_ptr<CudaMtpLayer> mtp_;  // after load_mtp
  std::int64_t H_, I_, nh_, nkv_, hd_, V_, qkv_width_;
  std::int32_t max_tokens_, max_seqs_, max_rows_, max_model_len_, max_table_, tile_q_,
      partial_entries_;
  std::size_t weight_bytes_ = 0;
  std::int64_t free_at_open_ = 0, buffer_bytes_ = 0, device_total_ = 0;

  DeviceBuffer embed_;    // [V, H]
  DeviceBuffer lm_head_;  // [V, H] (absent when tied to embed_)
  LinearLayout lm_head_fmt_;
  DeviceBuffer dequant_scratch_;  // bf16 form of the largest quantized weight (prefill)
  DeviceBuffer final_norm_;
  std::vector<Layer> layers_;
  std::vector<arch::LayerPlan> plans_;  // [num_layers]: the steps launch_step walks
  DeviceBuffer inv_freq_;               // [rot_dim / 2] f32
  int rot_dim_ = 0;                     // dims of a head that rotate (hd unless partial rotary)
  float rope_mscale_ = 1.0f;
  std::unique_ptr<CudaKvStore> kv_;

  // Step inputs: one i32 array staged in pinned memory and copied in one go.
  PinnedBuffer host_in_;
  DeviceBuffer dev_in_;
  Event inputs_copied_;
  bool inputs_pending_ = false;
  // Activations, sized for max_batch_tokens rows.
  DeviceBuffer residual_;                // [T, H] f32
  DeviceBuffer normed_;                  // [T, H] bf16
  DeviceBuffer qkv_;                     // [T, qkv_width] bf16
  DeviceBuffer attn_;                    // [T, nh hd] bf16
  DeviceBuffer proj_;                    // [T, H] bf16 (o_proj and down_proj outputs)
  DeviceBuffer gate_up_;                 // [T, 2I] bf16
  DeviceBuffer act_;                     // [T, I] bf16
  DeviceBuffer partial_o_, partial_ml_;  // split-K scratch
  DeviceBuffer split_counters_;          // [partial_entries_] u32, zero between launches
  DeviceBuffer rows_in_;                 // [R, H] bf16
  DeviceBuffer logits_;                  // [R, V] f32
  DeviceBuffer argmax_;                  // [R] i32
  DeviceBuffer argmax_scratch_;          // launch_argmax's per-block winners
  PinnedBuffer host_logits_;             // [R, V] f32
  PinnedBuffer host_tokens_;             // [R] i32
  DeviceBuffer sample_scratch_;          // launch_sample scratch (gpu_sampling)
  DeviceBuffer sample_in_;               // [R] SampleRow | [penalty_cap_] PenaltyEntry
  PinnedBuffer host_sample_in_;          // staging of sample_in_
  DeviceBuffer sample_out_;              // [R] i32 tokens | [R] f32 logprobs
  PinnedBuffer host_sample_out_;
  DeviceBuffer mask_in_;       // [R] i32 row -> mask index | [R, ceil(V/32)] u32 masks
  PinnedBuffer host_mask_in_;  // staging of mask_in_
  std::int64_t penalty_cap_ = 0;
  Event compute_done_, out_copied_;
  bool decode_kernel_ = false;            // the decode attention kernel supports this shape
  bool flash_ = false;                    // the flash kernel runs multi-query tiles
  std::int32_t flash_tile_q_ = 1;         // query tokens per flash tile
  int fused_max_m_ = 0;                   // steps of <= this many rows take the fused kernels
  int fused_mma_ = -1, fused_waves_ = 0;  // CudaKernelChoices::fused_gemv_mma / _waves
  QgemvChoice qgemv_choice_;              // CudaKernelChoices::qgemv_mma_min_m, qgemv_stream_stages
  bool pdl_ = false;   // CudaRunnerOptions::programmatic_launch and CudaFeatures (sm_90+)
  int split_cap_ = 0;  // CudaKernelChoices::attn_split_cap
  AttentionPathConfig attn_path_;  // set by allocate_buffers
  StepProfiler profiler_;
  bool graphs_enabled_ = true;
  // Key: bucket, attention tiles (single, multi, flash), split-K factors x 4, MLA's split,
  // the hidden rows' layer list (hidden_key_).
  using GraphKey = std::array<std::int32_t, 10>;
  std::map<GraphKey, GraphExec> graphs_;
  // A verify step replays a graph with at most this many drafts a sequence.
  static constexpr std::int32_t kMaxGraphDrafts = 8;

  // Hidden rows (cuda_runner_hidden.cpp). A step that asks for them is captured and
  // replayed as any other, its copies inside the graph: the graph key names the layer list
  // (hidden_key_: 1 + its index in hidden_sets_, 0 for none), and the copies write into
  // hidden_, which stays put until reserve_hidden grows it (then those graphs are dropped).
  DeviceBuffer hidden_;                                 // [max_tokens_, H x hidden_cap_] f32
  PinnedBuffer host_hidden_;                            // staging of the copy back, in chunks
  std::int32_t hidden_cap_ = 0;                         // hidden states a row holds at most
  std::vector<std::int32_t> hidden_layers_;             // this step's; empty: none
  std::vector<std::vector<std::int32_t>> hidden_sets_;  // every list seen, for the graph key
  std::int32_t hidden_key_ = 0;

  // A shared expert's scratch (GLM-4.5; cuda_runner_moe_route.cpp), max_batch_tokens rows.
  std::int64_t moe_S_ = 0;       // its intermediate size; 0: none
  DeviceBuffer moe_shared_gu_;   // [T, 2 S] bf16
  DeviceBuffer moe_shared_act_;  // [T, S] bf16
  DeviceBuffer moe_shared_out_;  // [T, H] bf16

  // Mixture-of-experts scratch (cuda_runner_moe.cpp), sized for max_batch_tokens rows;
  // empty for a dense model. S = T k slots, rows = moe_rows_cap(S, E, align).
  // Multi-head latent attention (config_.mla): its rope over qk_rope_head_dim is inv_freq_,
  // rope_mscale_; scratch sized for max_batch_tokens rows (q goes to qkv_).
  bool mla_ = false;
  DeviceBuffer mla_qlat_;  // [T, q_lora] bf16
  DeviceBuffer mla_ckv_;   // [T, kv_lora + rope] bf16
  DeviceBuffer mla_attn_;  // [T, nh v] bf16
  // The split path's scratch (mla_split_scratch_bytes) for steps of at most
  // mla_split_rows_ token rows; 0 rows: the shapes are not the split path's.
  DeviceBuffer mla_split_;
  std::int32_t mla_split_rows_ = 0;
  bool dsa_scores_mma_ = false;      // CudaKernelChoices::dsa_scores_mma
  bool mla_prefill_chunks_ = false;  // CudaKernelChoices::mla_prefill_chunks (and a split path)
  // DSA's indexer (config_.mla->dsa()), max_batch_tokens rows; the selection of the last
  // layer that ran its indexer, which the "shared" layers after it reuse.
  DeviceBuffer dsa_q_;       // [T, Hi Di] f32: wq_b q_lat
  DeviceBuffer dsa_kw_;      // [T, Di + Hi] f32: wk h | weights_proj h
  DeviceBuffer dsa_tokens_;  // [T] DsaToken
  DeviceBuffer dsa_sel_;     // [T, index_topk] i32
  DeviceBuffer dsa_scores_;  // [dsa_rows_, max_model_len_] f32
  std::int32_t dsa_rows_ = 0;
  DeviceBuffer dsa_topk_scratch_;  // launch_dsa_topk's, for dsa_topk_rows_ rows a launch
  std::int32_t dsa_topk_rows_ = 0;

  bool has_moe_ = false;
  std::int64_t moe_E_ = 0, moe_k_ = 0, moe_I_ = 0;
  int moe_gemv_max_ = 0;
  bool moe_grouped_ = false;      // the GEMM path runs launch_moe_grouped_gemm
  DeviceBuffer moe_logits_;       // [T, E] f32
  DeviceBuffer moe_ids_;          // [S] i32
  DeviceBuffer moe_weights_;      // [S] f32
  DeviceBuffer moe_group_;        // launch_moe_group's output (MoeGroupLayout)
  DeviceBuffer moe_xg_;           // [rows, H] bf16: each grouped row's input (GEMM path)
  DeviceBuffer moe_gu_;           // [rows, 2 Ie] bf16 (GEMM path)
  DeviceBuffer moe_act_;          // [rows, Ie] bf16
  DeviceBuffer moe_out_;          // [rows, H] bf16: each grouped row's expert output
  PinnedBuffer moe_host_starts_;  // [E + 1] the group starts, for the GEMM path
  Event moe_starts_ready_;
  DeviceBuffer moe_counter_;  // u32: launch_moe_decode_router's finished blocks (zero between)
  // The routed experts' device format (plan_weight_formats, or the random-weights
  // constructor; the same in every sparse layer). Low-bit experts (cuda_runner_moe.cpp): decode
  // runs one GEMV row per (token, expert) slot; larger steps run the low-bit grouped GEMM
  // (moe_lowbit_gemm_), or, where it cannot, dequantize the nonempty experts of a matrix into
  // moe_wscratch_ and run the same grouped GEMM as bf16 experts.
  ExpertFormat expert_format_;
  // Layer L's stacked experts: gate|up, or (down) down.
  StackedExperts layer_experts(const Layer &L, bool down) const;
  DeviceBuffer moe_gu32_;         // [min(T, moe_gemv_max_) k, 2 Ie] f32: the slot GEMV's sums
  DeviceBuffer moe_wscratch_;     // [E, 2 Ie, H] bf16: one matrix's dequantized experts
  int moe_gemm_rows_ = 0;         // CudaKernelChoices::moe_gemm_rows
  bool moe_lowbit_gemm_ = false;  // low-bit experts on launch_moe_grouped_gemm_lowbit
  bool moe_gguf_qgemv_ = false;   // CudaKernelChoices::moe_gguf_qgemv
  // cuda_runner_moe.cpp: the experts of a step on the slot-ordered low-bit GEMVs.
  void launch_moe_lowbit_slots(const Layer &L, std::int32_t T, const MoeExpertAct &ea);
};

}  // namespace keel::cuda
