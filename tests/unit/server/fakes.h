// Test doubles for the server's unit tests: a byte-level ModelText and an in-process
// engine thread that emits one token per "step".
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine_api.h"
#include "registry/model_text.h"

namespace keel::test {

// Token id = byte value; the text of a token is that byte. `single` lists texts that
// encode to the one token 1000, standing in for a vocabulary's tool-call markers.
class ByteText final : public ModelText {
 public:
  std::vector<std::string> single;
  std::vector<TokenId> encode(std::string_view text, bool) const override {
    for (const auto &s : single)
      if (text == s) return {1000};
    return std::vector<TokenId>(reinterpret_cast<const unsigned char *>(text.data()),
                                reinterpret_cast<const unsigned char *>(text.data()) + text.size());
  }
  std::string decode(const std::vector<TokenId> &ids) const override {
    std::string s;
    for (auto t : ids) s.push_back(static_cast<char>(t));
    return s;
  }
  std::string token_text(TokenId id) const override {
    return std::string(1, static_cast<char>(id));
  }
  std::unique_ptr<StreamingDetokenizer> streaming() const override {
    struct D : StreamingDetokenizer {
      std::string push(TokenId t) override { return std::string(1, static_cast<char>(t)); }
      std::string flush() override { return {}; }
    };
    return std::make_unique<D>();
  }
  bool has_chat_template() const override { return false; }
  std::string render_chat(const nlohmann::ordered_json &, const nlohmann::ordered_json &,
                          bool) const override {
    return {};
  }
  std::int64_t vocab_size() const override { return 256; }
};

// Emits the bytes of `script` (cycled) one per step, max_tokens of them, then kLength.
class ScriptEngine final : public EngineApi {
 public:
  explicit ScriptEngine(std::string script,
                        std::chrono::milliseconds step = std::chrono::milliseconds(1))
      : script_(std::move(script)), step_(step), thread_([this] { loop(); }) {}
  ~ScriptEngine() override {
    {
      std::lock_guard l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void submit(GenerationRequest r, EventSink sink) override {
    std::lock_guard l(mu_);
    live_.push_back({std::move(r), std::move(sink), 0});
    cv_.notify_all();
  }
  void abort(RequestId id) override {
    std::lock_guard l(mu_);
    aborts_.insert(id.value);
    cv_.notify_all();
  }
  EngineStatus status() const override {
    std::lock_guard l(mu_);
    EngineStatus s;
    s.running = static_cast<std::int32_t>(live_.size());
    s.steps = steps_;
    return s;
  }

 private:
  struct Live {
    GenerationRequest req;
    EventSink sink;
    int emitted;
  };
  void loop() {
    std::unique_lock l(mu_);
    while (!stop_) {
      cv_.wait_for(l, step_, [&] { return stop_; });
      if (stop_) break;
      ++steps_;
      // The step's events are made under the lock and delivered after it: a sink may
      // submit (a push_back into live_, which invalidates every iterator of a deque), so
      // no iterator may live across an unlocked sink call.
      std::vector<std::pair<EventSink, RequestEvent>> out;
      for (auto it = live_.begin(); it != live_.end();) {
        RequestEvent e;
        e.id = it->req.id;
        if (aborts_.erase(it->req.id.value)) {
          e.finish = FinishReason::kAbort;
        } else {
          e.tokens.push_back(static_cast<unsigned char>(script_[it->emitted % script_.size()]));
          if (it->req.sampling.logprobs >= 0) e.sampled_logprobs.push_back({e.tokens[0], -0.5f});
          if (++it->emitted >= it->req.sampling.max_tokens) e.finish = FinishReason::kLength;
        }
        out.emplace_back(it->sink, e);
        it = e.finish.has_value() ? live_.erase(it) : std::next(it);
      }
      l.unlock();
      for (auto &[sink, e] : out) sink(e);
      l.lock();
    }
    for (auto &lv : live_) {
      RequestEvent e;
      e.id = lv.req.id;
      e.finish = FinishReason::kAbort;
      lv.sink(e);
    }
  }

  std::string script_;
  std::chrono::milliseconds step_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Live> live_;
  std::set<std::uint64_t> aborts_;
  std::uint64_t steps_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace keel::test
