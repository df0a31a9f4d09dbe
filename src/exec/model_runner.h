// A loaded model on one backend together with its paged KV cache. Every method runs on
// the engine thread that owns the ExecContext it was made with (checked in every
// build); nothing here is thread-safe by design, since exactly one thread drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "core/sampling_params.h"
#include "exec/eagle3_runner.h"
#include "exec/forward_batch.h"
#include "exec/mtp_step.h"
#include "formats/model_config.h"
#include "kv/block_store.h"

namespace keel {

// One logits row to sample where the logits are (ModelRunner::forward_sample): the
// request's parameters; u = uniform_real_distribution<double>(0, 1) drawn from the
// request's RNG exactly where Sampler::sample would draw it (Sampler::draw_uniform;
// unused when greedy); the request's tokens so far (for the penalties).
//
// Structured output: `mask` ([ceil(V/32)] words, bit t % 32 of word t / 32 set when
// token t may be sampled; tokens past it may not) is applied before sampling, or empty
// for none. Its words may still be in the making when forward_sample is called (the
// engine computes them while the forward runs): the runner calls *mask_ready, when set,
// after enqueuing the forward and before reading them; it may throw (the step fails).
struct DeviceSampleRow {
  const SamplingParams *params = nullptr;
  double u = 0;
  std::span<const TokenId> prompt, generated;
  std::span<const std::uint32_t> mask;
  const std::function<void()> *mask_ready = nullptr;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig &config() const = 0;
  virtual KvBlockStore &kv() = 0;
  // Computes the batch, writes its new K/V into the blocks its block tables name, and
  // fills `out` with the requested logits rows.
  virtual void forward(const ForwardBatch &batch, ForwardOutput &out) = 0;

  // Runners that sample on their device (no logits cross to the host) say so here.
  // How the weights are held where this runner multiplies by them ("bf16", "q4_k+q6_k",
  // "bf16+fp8"); empty when the runner cannot tell.
  virtual std::string weight_format() const { return {}; }
  virtual bool samples_on_device() const { return false; }
  // Whether forward() returns SequenceSlice::Logits::kTail rows (a speculative verify:
  // docs/ARCHITECTURE.md, "The verify shape"); the engine drafts only for runners that do.
  virtual bool verifies_drafts() const { return false; }
  // The most logits rows one forward may return (0: no limit); the engine drafts no more
  // rows than this leaves room for.
  virtual std::int32_t max_logits_rows() const { return 0; }
  // ... and which requests' rows it samples there (a step with any other samples on the
  // host); all of them unless it says otherwise.
  virtual bool samples_row_on_device(const SamplingParams &) const { return true; }
  // ... and those that apply DeviceSampleRow::mask there too (else a step with a
  // constrained row samples on the host).
  virtual bool masks_on_device() const { return false; }
  // forward(), then every requested logits row i sampled with rows[i] (the Sampler's
  // semantics, bit-for-bit its choice given the same u): fills out.row_seq, row_pos,
  // sampled and sampled_logprobs, leaves out.logits empty. Top-N alternatives are not
  // computed: steps that need them use forward() and the host Sampler.
  virtual void forward_sample(const ForwardBatch &, std::span<const DeviceSampleRow>,
                              ForwardOutput &) {
    throw Error(ErrorCode::kUnsupported, "model runner: no device sampling");
  }

  // Opens the model at `path` on this runner's device (its context, threads and stream)
  // with a KV pool of its own: `num_blocks` blocks of this runner's block size, or, for
  // 0, as many as this runner's pool has (the CPU) or as half the free device memory
  // holds, capped there (CUDA). A draft model (engine/draft_model_drafter.h) runs on it
  // between this runner's steps, on the same thread. Throws Error(kUnsupported) where
  // this runner cannot host one; the errors of opening the model otherwise.
  virtual std::unique_ptr<ModelRunner> open_sibling(const std::filesystem::path &path,
                                                    std::int32_t num_blocks) {
    (void)path, (void)num_blocks;
    throw Error(ErrorCode::kUnsupported, "this runner cannot run a second model beside it");
  }

  // The checkpoint's multi-token-prediction layer as a drafter (exec/mtp_step.h).
  // load_mtp binds it; throws Error(kUnsupported) naming why when the model has none or
  // this runner cannot run it, Error(kFormat) naming a malformed tensor. A runner that
  // can also fills ForwardOutput::hidden when ForwardBatch::want_hidden asks.
  virtual void load_mtp() {
    throw Error(ErrorCode::kUnsupported, "this runner cannot run MTP heads yet");
  }
  // One MTP step over input.tokens.size() consecutive positions of one sequence; its
  // keys and values go into `cache` at input.start_pos (<= cache.length) onwards.
  virtual void mtp_forward(MtpCache &, const MtpInput &, MtpOutput &) {
    throw Error(ErrorCode::kUnsupported, "this runner cannot run MTP heads yet");
  }
  // Bytes of the loaded MTP layer's tensors where it holds them apart from the model's (a
  // device copy; the CPU reads the mapped files), and of the memory it set aside beside
  // them (a device layer's KV pool and scratch, the target's hidden rows), for the log.
  virtual std::int64_t mtp_weights_bytes() const { return 0; }
  virtual std::int64_t mtp_reserved_bytes() const { return 0; }

  // The EAGLE-3 head in directory `dir` bound to this runner's device and model
  // (exec/eagle3_runner.h), run between this runner's steps on the same thread; a runner
  // that can also fills ForwardOutput::hidden with the layers ForwardBatch::hidden_layers
  // names. Destroy it before this runner. Throws Error(kUnsupported) where this runner
  // cannot run one, Error(kFormat) naming the tensor or config field at fault.
  virtual std::unique_ptr<Eagle3Runner> open_eagle3_head(const std::filesystem::path &dir) {
    (void)dir;
    throw Error(ErrorCode::kUnsupported, "this runner cannot run an EAGLE-3 head");
  }
};

}  // namespace keel
