// A deterministic toy model for engine tests. Its KV cache stores, for every slot,
// the token and position written there; the logits for position p are a hash of the
// token history read back from the KV blocks through the block table. A wrong block
// table, an overwritten shared block or a bad prefix hit changes the history and so
// the output, and a slot whose stored position is wrong poisons the result.
#pragma once

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/output_constraint.h"
#include "engine/engine.h"
#include "exec/model_runner.h"
#include "exec/sampler.h"

namespace keel::test {

inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

inline std::uint64_t history_hash(std::span<const TokenId> history) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (TokenId t : history) h = mix64(h ^ static_cast<std::uint32_t>(t)) + 0x632be59bd9b4e019ULL;
  return h;
}

// logits: [vocab]. Deterministic in the whole history.
inline void toy_logits(std::span<const TokenId> history, std::span<float> logits) {
  const std::uint64_t h = history_hash(history);
  for (std::size_t v = 0; v < logits.size(); ++v)
    logits[v] = static_cast<float>(mix64(h + 0x1234567ULL * (v + 1)) >> 44) / 65536.0f;
}

inline TokenId toy_argmax(std::span<const TokenId> history, std::int32_t vocab) {
  std::vector<float> l(vocab);
  toy_logits(history, l);
  return static_cast<TokenId>(std::max_element(l.begin(), l.end()) - l.begin());
}

// What greedy generation must produce for a prompt, computed without the engine.
inline std::vector<TokenId> toy_greedy(std::vector<TokenId> history, int n, std::int32_t vocab) {
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) {
    TokenId t = toy_argmax(history, vocab);
    out.push_back(t);
    history.push_back(t);
  }
  return out;
}

class ToyKv final : public KvBlockStore {
 public:
  ToyKv(std::int32_t blocks, std::int32_t bs)
      : blocks_(blocks), bs_(bs), slots_(blocks * bs * 2, 0) {}
  std::int32_t num_blocks() const override { return blocks_; }
  std::int32_t block_size() const override { return bs_; }
  std::size_t block_bytes() const override { return static_cast<std::size_t>(bs_) * 2 * 4; }
  void copy_block(std::int32_t src, std::int32_t dst) override {
    check(src);
    check(dst);
    std::copy_n(&slots_[src * bs_ * 2], bs_ * 2, &slots_[dst * bs_ * 2]);
    ++copies;
  }
  void save_block(std::int32_t b, std::span<std::byte> out) override {
    check(b);
    std::memcpy(out.data(), &slots_[b * bs_ * 2], block_bytes());
  }
  void load_block(std::int32_t b, std::span<const std::byte> in) override {
    check(b);
    std::memcpy(&slots_[b * bs_ * 2], in.data(), block_bytes());
  }
  // slot content: (token, position + 1); 0 means never written.
  std::int32_t *slot(std::int32_t b, std::int32_t s) {
    check(b);
    return &slots_[(b * bs_ + s) * 2];
  }
  std::atomic<int> copies{0};

 private:
  void check(std::int32_t b) const {
    if (b < 0 || b >= blocks_) throw Error(ErrorCode::kInternal, "toy kv: block out of range");
  }
  std::int32_t blocks_, bs_;
  std::vector<std::int32_t> slots_;  // [blocks][bs][2]
};

class ToyRunner final : public ModelRunner {
 public:
  ToyRunner(std::int32_t blocks, std::int32_t bs, std::int32_t vocab = 101) : kv_(blocks, bs) {
    cfg_.arch_name = "toy";
    cfg_.vocab_size = vocab;
    cfg_.max_position_embeddings = 1 << 20;
  }
  const ModelConfig &config() const override { return cfg_; }
  ModelConfig &mutable_config() { return cfg_; }
  KvBlockStore &kv() override { return kv_; }
  ToyKv &toy_kv() { return kv_; }

  void forward(const ForwardBatch &batch, ForwardOutput &out) override {
    {
      std::lock_guard lk(mu);
      threads.insert(std::this_thread::get_id());
    }
    if (on_forward) on_forward(batch);
    computed_tokens += batch.total_tokens();
    ++forwards;
    const std::int32_t bs = kv_.block_size();
    // Write every sequence's new K/V first (as a real backend does, layer by layer).
    for (const auto &s : batch.seqs)
      for (std::int32_t j = 0; j < s.num_tokens; ++j) {
        const std::int32_t pos = s.start_pos + j;
        if (pos / bs >= s.num_blocks)
          throw Error(ErrorCode::kInternal, "toy: position past blocks");
        std::int32_t *slot = kv_.slot(batch.block_table[s.block_offset + pos / bs], pos % bs);
        slot[0] = batch.tokens[s.token_offset + j];
        slot[1] = pos + 1;
      }
    out.vocab_size = cfg_.vocab_size;
    out.logits.clear();
    out.row_seq.clear();
    out.row_pos.clear();
    std::vector<TokenId> history;
    for (std::int32_t si = 0; si < static_cast<std::int32_t>(batch.seqs.size()); ++si) {
      const auto &s = batch.seqs[si];
      if (s.logits == SequenceSlice::Logits::kNone || drop_rows) continue;
      const std::int32_t first = s.start_pos + s.first_logits_token();
      if (s.logits == SequenceSlice::Logits::kTail) ++verify_slices;
      for (std::int32_t pos = first; pos < s.start_pos + s.num_tokens; ++pos) {
        history.clear();
        bool poisoned = false;
        for (std::int32_t p = 0; p <= pos; ++p) {
          const std::int32_t *slot = kv_.slot(batch.block_table[s.block_offset + p / bs], p % bs);
          if (slot[1] != p + 1) poisoned = true;  // another sequence's or stale data
          history.push_back(slot[0]);
        }
        const std::size_t at = out.logits.size();
        out.logits.resize(at + cfg_.vocab_size);
        std::span<float> row(out.logits.data() + at, cfg_.vocab_size);
        toy_logits(history, row);
        if (poisoned) {
          ++poisoned_rows;
          std::fill(row.begin(), row.end(), 0.0f);
        }
        out.row_seq.push_back(si);
        out.row_pos.push_back(pos);
      }
    }
    const auto rows = static_cast<std::int32_t>(out.row_seq.size());
    if (rows > most_rows) most_rows = rows;
  }

  // Device sampling as a GPU runner does it, here on the host: the host Sampler's
  // choice for the engine's draw u, with no logits returned.
  bool samples_on_device() const override { return device_sampling; }
  bool verifies_drafts() const override { return verify; }
  std::int32_t max_logits_rows() const override { return max_rows; }
  bool masks_on_device() const override { return device_masks; }
  void forward_sample(const ForwardBatch &batch, std::span<const DeviceSampleRow> rows,
                      ForwardOutput &out) override {
    if (!device_sampling) return ModelRunner::forward_sample(batch, rows, out);
    forward(batch, out);
    --forwards;
    ++sampled_forwards;
    const std::size_t n = out.row_seq.size();
    if (rows.size() != n) throw Error(ErrorCode::kInternal, "toy: sample rows != logits rows");
    out.sampled.resize(n);
    out.sampled_logprobs.resize(n);
    for (const DeviceSampleRow &r : rows) {
      if (!r.mask.empty() && !device_masks)
        throw Error(ErrorCode::kInternal, "toy: a mask for a runner without device masks");
      if (r.mask_ready) (*r.mask_ready)();  // as a GPU runner: after the forward is enqueued
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::span<float> l(out.logits.data() + i * cfg_.vocab_size, cfg_.vocab_size);
      if (!rows[i].mask.empty()) {
        apply_token_mask(l, rows[i].mask);
        ++masked_rows;
      }
      Sampler s(*rows[i].params, 0);  // its own RNG is never used: u is given
      const SampledToken r = s.sample_with(l, rows[i].prompt, rows[i].generated, rows[i].u);
      out.sampled[i] = sample_offset + r.token;
      out.sampled_logprobs[i] = r.logprob;
    }
    out.logits.clear();
  }
  bool device_sampling = false;                // set before the engine starts (setup)
  bool device_masks = false;                   // and whether it applies structured-output masks
  bool verify = true;                          // returns kTail rows (speculative verify)
  std::int32_t max_rows = 0;                   // max_logits_rows (0: no limit)
  std::atomic<std::int32_t> most_rows{0};      // the most logits rows one forward returned
  std::atomic<std::int64_t> verify_slices{0};  // kTail slices computed
  std::atomic<std::int64_t> masked_rows{0};    // rows masked "on the device"
  TokenId sample_offset = 0;                   // a broken device sampler: tokens shifted by this

  std::function<void(const ForwardBatch &)> on_forward;  // runs on the engine thread
  std::atomic<bool> drop_rows{false};                    // a broken backend: no logits
  std::atomic<std::int64_t> computed_tokens{0};
  std::atomic<std::int64_t> forwards{0};          // steps that returned logits
  std::atomic<std::int64_t> sampled_forwards{0};  // steps sampled "on the device"
  std::atomic<std::int64_t> poisoned_rows{0};
  std::mutex mu;
  std::set<std::thread::id> threads;

 private:
  ModelConfig cfg_;
  ToyKv kv_;
};

// Builds an engine over a ToyRunner and keeps a pointer to the runner for inspection.
// The runner is made on the engine thread (by the factory) and outlives every use here
// as long as the engine does.
struct ToyEngine {
  ToyRunner *runner = nullptr;
  std::unique_ptr<Engine> engine;
  ToyEngine(std::int32_t blocks, std::int32_t bs, EngineConfig cfg = {},
            std::function<void(ToyRunner &)> setup = {}) {
    engine = std::make_unique<Engine>(
        [&, blocks, bs] {
          auto r = std::make_unique<ToyRunner>(blocks, bs);
          if (setup) setup(*r);
          runner = r.get();
          EngineBackend b;
          b.runner = std::move(r);
          return b;
        },
        cfg);
  }
  Engine &operator*() { return *engine; }
  Engine *operator->() { return engine.get(); }
};

}  // namespace keel::test
