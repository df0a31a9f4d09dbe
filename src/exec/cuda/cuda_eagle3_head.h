// An EAGLE-3 head on the CUDA runner's device (CudaModelRunner::open_eagle3_head;
// `--speculative eagle3:PATH`): the math of exec/arch/eagle3_head.h, its files loaded and
// checked by arch::Eagle3Weights, its weights bf16 on the device, run on the target's
// CudaContext and compute stream between the target's steps (the engine thread). The
// target's embedding serves when the head stores none.
//
// Its keys and values per request (MtpCache::device) are a block table into a paged pool
// of the head's own ([blocks][K|V][block_size][kv heads][head_dim] bf16: the runner's
// KvLayout with one layer), allocated once at open, so no step allocates or frees device
// memory; a request whose positions the pool cannot hold gets Error(kResourceExhausted)
// before anything runs (HiddenStateDrafter then drafts no more for it). Truncation lowers
// MtpCache::length; blocks go back to the pool when the MtpCache is destroyed.
//
// A step over n positions runs in chunks of kChunk: per chunk one upload (token ids,
// positions, KV slots, attention tiles, the block table and the input rows), the kernels
// (fc on cuBLASLt with f32 output, the embedding and norms, [e ; hidden_norm(g)] gathered
// by two strided copies, qkv, rope, the KV write and the paged attention kernels over the
// head's pool, o_proj, the residual adds folded into the RMSNorms, gate|up, SwiGLU, down,
// lm_head over the draft vocabulary, argmax), and one copy back of the argmax and h'. The
// residual stream stays f32 as on the CPU; the GEMMs read bf16 activations, as the
// runner's do.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "exec/cuda/cuda_context.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/kernels.h"
#include "exec/eagle3_runner.h"

namespace keel::cuda {

class CudaModelRunner;
struct HeadBlockPool;  // the pool's free blocks (head_block_pool.h)

class CudaEagle3Head final : public Eagle3Runner {
 public:
  // Positions a pass computes at most (a longer step runs in passes).
  static constexpr int kChunk = 128;

  // Opens the head in `dir` for `target` (its config, embedding, context, KV block size
  // and max_model_len). Errors: arch::Eagle3Weights's, Error(kUnsupported) naming a shape
  // the kernels do not take, Error(kResourceExhausted) when the device cannot hold it.
  CudaEagle3Head(const std::filesystem::path &dir, CudaModelRunner &target);
  ~CudaEagle3Head() override;

  const Eagle3Config &config() const override { return cfg_; }
  const std::vector<std::int32_t> &aux_layers() const override { return aux_; }
  std::int64_t weights_bytes() const override { return weights_bytes_; }
  std::int64_t reserved_bytes() const override { return reserved_bytes_; }
  // Device memory set aside beside the weights: the pool and the scratch, and what
  // CudaModelRunner::open_eagle3_head adds (the target's hidden rows).
  void add_reserved_bytes(std::int64_t bytes) { reserved_bytes_ += bytes; }
  void forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) override;
  void truncate(MtpCache &cache, std::int32_t kept) override { cache.length = kept; }

  // The pool: blocks in all, blocks free, bytes (tests, logs).
  std::int32_t pool_blocks() const { return pool_blocks_; }
  std::int32_t free_blocks() const;
  std::int64_t pool_bytes() const { return static_cast<std::int64_t>(pool_.bytes()); }

 private:
  // One pass over m <= kChunk positions from `first` (an index into in.tokens / in.hidden)
  // at position pos0; the head's rows [head_from, m) go through lm_head. Fills rows
  // [first, first + m) of out.hidden and appends to out.argmax / out.logits.
  void run_chunk(const std::vector<std::int32_t> &blocks, const MtpInput &in, int first, int m,
                 int head_from, MtpOutput &out);

  CudaContext &ctx_;
  Gemm gemm_;
  Eagle3Config cfg_;
  std::vector<std::int32_t> aux_;
  std::vector<std::int64_t> d2t_;
  std::int64_t weights_bytes_ = 0, reserved_bytes_ = 0;
  std::int64_t H_, NH_, G_, D_, I_, V_, Vd_, aux_w_, qkv_w_;
  int tile_q_ = 1, rot_dim_ = 0;
  float mscale_ = 1.0f, eps_ = 0;
  bool interleaved_ = false;

  // Weights, bf16: fc [H, aux_w], q|k|v [qkv_w, 2H], o [H, NH D], gate|up [2I, H],
  // down [H, I], lm_head [Vd, H], the four norms [H]; embed [V, H] when the head has its own.
  DeviceBuffer fc_, qkv_, o_, gate_up_, down_, lm_head_, embed_, norms_;
  const bf16 *embed_table_ = nullptr;  // embed_ or the target's
  DeviceBuffer inv_freq_;              // [rot_dim / 2] f32

  // The paged pool of keys and values, and who holds which block.
  KvLayout layout_;
  std::int32_t pool_blocks_ = 0, max_blocks_ = 0;  // max_blocks_: a request's at most
  DeviceBuffer pool_;
  std::shared_ptr<HeadBlockPool> free_;  // shared with every cache's blocks

  // One pass's scratch, kChunk rows (cuda_eagle3_head.cpp says which is which).
  PinnedBuffer host_in_;
  DeviceBuffer dev_in_;
  DeviceBuffer aux_bf16_, e_, en_, gn_, cat_, qkv_act_, attn_, proj_, normed_, gu_, act_;
  DeviceBuffer logits_, argmax_scratch_;
  DeviceBuffer out_;  // [kChunk] i32 argmax | [kChunk, H] f32 the residual stream (h')
  PinnedBuffer host_out_, host_logits_;
  Event computed_, copied_;
};

}  // namespace keel::cuda
