// The checkpoint's multi-token-prediction layer on the CUDA runner's device
// (CudaModelRunner::load_mtp; `--speculative mtp`): the math of exec/arch/mtp_head.h
// (GLM-4.5's GQA block, DeepSeek-V3's MLA block, GLM-5's MLA block with its own DSA
// indexer), run on the target's CudaContext and compute stream between its steps.
//
// The decoder block is not written again: it is a second CudaModelRunner of one layer
// (the target's ModelConfig with num_layers 1, the layer's MoE / MLA / DSA settings; its
// tensors model.layers.{num_hidden_layers}.* read through a renaming WeightSource), fed
// its input rows (FedInput) instead of token embeddings, its final norm
// shared_head.norm, its LM head shared_head.head or, when the layer stores none (or the
// same bytes as the target's), the target's on the device (never a second copy of the
// vocabulary). This class computes the input,
//   u = eh_proj([enorm(embed(x_{t+1})) ; hnorm(norm(h_t))])   (e zero at position 0;
//       chained: hnorm(h'), without the target's norm),
// on the device (the target's embedding unless the layer has its own), hands it to the
// block, whose hidden rows (the residual after the layer, before shared_head.norm) are h'
// and whose argmax on the device is the guess.
//
// Its keys and values (latent rows for MLA, with GLM-5's index keys) live in the block's
// own paged KV pool, sized when the layer loads (as many blocks as the target's pool, at
// most a quarter of the free memory): per request MtpCache::device maps its positions to
// blocks of it (head_block_pool.h), truncation lowers MtpCache::length, and a request the
// pool cannot hold gets Error(kResourceExhausted) before anything runs. Nothing is
// allocated while steps run.
//
// Eager, no CUDA graphs: a step is one sequence through one layer (a small fraction of a
// target step), its shape changing with every request's catch-up; graphs would need a
// bucket per shape for little gain.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/cuda/cuda_context.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/gemm.h"
#include "exec/mtp_step.h"
#include "formats/model_weights.h"

namespace keel::cuda {

struct HeadBlockPool;  // head_block_pool.h

class CudaMtpLayer {
 public:
  static constexpr int kChunk = 128;    // positions a pass computes at most
  static constexpr int kHeadRows = 16;  // head rows a pass at most (MtpInput::Head::kAll)

  // Binds the MTP layer of `weights` (the files `target` was opened from). Errors:
  // Error(kUnsupported) when the model has none, Error(kFormat) naming a missing or
  // mis-shaped tensor (its name in the files), Error(kResourceExhausted) when the device
  // cannot hold it.
  CudaMtpLayer(CudaModelRunner &target, const ModelWeights &weights);
  ~CudaMtpLayer();

  // One step (exec/mtp_step.h): MtpOutput::hidden is h' before shared_head.norm.
  void forward(MtpCache &cache, const MtpInput &in, MtpOutput &out);

  std::int64_t weights_bytes() const { return weights_bytes_; }
  std::int64_t reserved_bytes() const { return reserved_bytes_; }
  void add_reserved_bytes(std::int64_t bytes) { reserved_bytes_ += bytes; }
  // The KV pool: blocks in all, blocks free, bytes (tests, logs).
  std::int32_t pool_blocks() const;
  std::int32_t free_blocks() const;
  std::int64_t pool_bytes() const;
  // Whether the layer's LM head is the target's (stored none, or the same bytes).
  bool borrows_head() const { return borrows_head_; }

 private:
  // One pass over m <= kChunk positions from `first` (an index into in.tokens / in.hidden);
  // rows [head_from, m) go through the head. Fills rows [first, first + m) of out.hidden and
  // appends to out.argmax / out.logits.
  void run_pass(const std::vector<std::int32_t> &blocks, const MtpInput &in, int first, int m,
                int head_from, MtpOutput &out);

  CudaContext &ctx_;
  Gemm gemm_;
  std::int64_t H_, V_;
  float eps_;
  bool borrows_head_ = false;
  std::int64_t weights_bytes_ = 0, reserved_bytes_ = 0;

  // bf16: eh_proj [H, 2H]; enorm, hnorm, the target's final norm [3, H]; embed [V, H] when
  // the layer has its own.
  DeviceBuffer eh_proj_, norms_, embed_;
  const bf16 *embed_table_ = nullptr;  // embed_ or the target's

  // One pass's input and scratch, kChunk rows: staged [tokens kChunk i32 | rows kChunk x H
  // f32], e = embed(x) f32, g = norm(h) f32, their norms bf16, [en ; gn] bf16, u f32 (the
  // block's FedInput rows).
  PinnedBuffer host_in_;
  DeviceBuffer dev_in_, e_, g_, en_, gn_, cat_, u_;
  std::vector<float> hidden_;  // the block's hidden rows of a pass

  std::unique_ptr<CudaModelRunner> block_;  // the decoder block, one layer, fed u
  std::shared_ptr<HeadBlockPool> free_;
  std::int64_t max_blocks_ = 0;  // blocks of one request at most (max_model_len)
};

}  // namespace keel::cuda
