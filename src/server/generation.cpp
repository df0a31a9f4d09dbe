#include "server/generation.h"

#include <algorithm>

#include "core/error.h"

namespace keel::server {

std::shared_ptr<Generation> Generation::start(ModelLease lease, GenerationSpec spec,
                                              std::atomic<std::uint64_t> &next_id, DeltaFn on_delta,
                                              DoneFn on_done) {
  std::shared_ptr<Generation> g(new Generation());
  const int total = static_cast<int>(spec.prompts.size()) * spec.n;
  g->lease_ = std::move(lease);
  g->on_delta_ = std::move(on_delta);
  g->on_done_ = std::move(on_done);
  g->results_.resize(total);
  g->started_.assign(total, false);
  g->remaining_ = total;
  for (int i = 0; i < total; ++i) {
    g->results_[i].prompt_index = i / spec.n;
    g->ids_.push_back(RequestId(next_id.fetch_add(1)));
    g->detok_.push_back(g->lease_->text->streaming());
    g->stops_.emplace_back(spec.stop);
  }
  g->spec_ = std::move(spec);
  EngineApi &engine = *g->lease_->engine;
  // Hold the lock while submitting so an early event waits until every id is known.
  std::lock_guard lock(g->mu_);
  for (int i = 0; i < total; ++i) {
    GenerationRequest req;
    req.id = g->ids_[i];
    req.group = g->ids_[0].value;  // one fairness group for all its prompts x n
    req.prompt = g->spec_.prompts[i / g->spec_.n];
    req.sampling = g->spec_.sampling;
    req.sampling.stop_strings.clear();  // stop strings are matched here, on text
    if (req.sampling.seed)
      req.sampling.seed = *req.sampling.seed + static_cast<std::uint64_t>(i % g->spec_.n);
    try {
      engine.submit(std::move(req), [g, i](const RequestEvent &e) { g->on_event(i, e); });
    } catch (...) {
      for (int k = 0; k < i; ++k) engine.abort(g->ids_[k]);
      g->on_done_ = nullptr;
      g->on_delta_ = nullptr;
      throw;
    }
  }
  return g;
}

void Generation::abort() {
  std::vector<RequestId> ids;
  {
    std::lock_guard lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    for (std::size_t i = 0; i < results_.size(); ++i)
      if (!results_[i].done) ids.push_back(ids_[i]);
  }
  for (auto id : ids) lease_->engine->abort(id);
}

void Generation::on_event(int index, const RequestEvent &e) {
  bool stop_engine = false;
  DoneFn done;
  {
    std::lock_guard lock(mu_);
    ChoiceResult &r = results_[index];
    if (r.done) return;
    if (!e.prompt_logprobs.empty()) {
      r.prompt_logprobs = e.prompt_logprobs;
      r.prompt_top = e.prompt_top_logprobs;
    }
    if (e.cached_prompt_tokens) r.cached_prompt_tokens = e.cached_prompt_tokens;
    if (e.stored_prompt_tokens) r.stored_prompt_tokens = e.stored_prompt_tokens;
    ChoiceDelta d;
    d.index = index;
    d.first = !started_[index];
    started_[index] = true;
    d.prompt_logprobs = e.prompt_logprobs;
    d.prompt_top = e.prompt_top_logprobs;
    d.cached_prompt_tokens = r.cached_prompt_tokens;
    d.stored_prompt_tokens = r.stored_prompt_tokens;
    StopMatcher &stop = stops_[index];
    if (!stop.hit()) {
      const auto &eos = lease_->info.eos_token_ids;
      // Token by token: an event may carry several (speculative decoding), and the
      // tokens after the one that completes a stop string are not output (nor counted).
      StopMatcher::Result s;
      for (std::size_t k = 0; k < e.tokens.size() && !s.hit; ++k) {
        const TokenId t = e.tokens[k];
        r.tokens.push_back(t);
        d.tokens.push_back(t);
        if (k < e.sampled_logprobs.size()) {
          r.logprobs.push_back(e.sampled_logprobs[k]);
          d.logprobs.push_back(e.sampled_logprobs[k]);
        }
        if (k < e.top_logprobs.size()) {
          r.top.push_back(e.top_logprobs[k]);
          d.top.push_back(e.top_logprobs[k]);
        }
        if (std::find(eos.begin(), eos.end(), t) != eos.end())
          continue;  // eos ends; it is not text
        // Before min_tokens no stop string ends the choice (the engine masks stop tokens).
        const bool match = static_cast<int>(r.tokens.size()) >= spec_.sampling.min_tokens;
        auto part = stop.push(detok_[index]->push(t), match);
        s.emit += part.emit;
        s.hit = part.hit;
        s.matched = std::move(part.matched);
      }
      if (e.finish && !s.hit) {
        auto part = stop.push(detok_[index]->flush(),
                              static_cast<int>(r.tokens.size()) >= spec_.sampling.min_tokens);
        s.emit += part.emit;
        s.hit = part.hit;
        s.matched = std::move(part.matched);
      }
      d.text = std::move(s.emit);
      if (s.hit) {
        d.finish = FinishReason::kStop;
        d.stop_sequence = s.matched;
        r.stop_sequence = s.matched;
        stop_engine = !e.finish;
      } else if (e.finish) {
        d.text += stop.flush().emit;
      }
    }
    if (e.finish && !d.finish) {
      d.finish = stop.hit() ? FinishReason::kStop : *e.finish;
      d.error = e.error;
    }
    r.text += d.text;
    if (d.finish) {
      r.finish = *d.finish;
      r.error = d.error;
      r.done = true;
      remaining_--;
    }
    if (on_delta_ && (!d.text.empty() || !d.tokens.empty() || d.finish)) on_delta_(d);
    if (remaining_ == 0 && on_done_) {
      done = std::move(on_done_);
      on_done_ = nullptr;
      on_delta_ = nullptr;
    }
  }
  // Ends it inside the engine (finish kStop there too), not by an abort round trip.
  if (stop_engine) lease_->engine->stop_request(ids_[index]);
  if (done) done(*this);
}

int Generation::prompt_tokens() const {
  int n = 0;
  for (const auto &p : spec_.prompts) n += static_cast<int>(p.size());
  return n;
}

int Generation::completion_tokens() const {
  int n = 0;
  for (const auto &r : results_) n += static_cast<int>(r.tokens.size());
  return n;
}

int Generation::cached_tokens() const {
  // One figure per prompt: the first sample's cache hit.
  int n = 0;
  for (std::size_t i = 0; i < results_.size(); i += static_cast<std::size_t>(spec_.n))
    n += results_[i].cached_prompt_tokens;
  return n;
}

int Generation::stored_tokens() const {
  int n = 0;
  for (std::size_t i = 0; i < results_.size(); i += static_cast<std::size_t>(spec_.n))
    n += results_[i].stored_prompt_tokens;
  return n;
}

bool Generation::any_error(std::string *message) const {
  for (const auto &r : results_)
    if (r.done && r.finish == FinishReason::kError) {
      if (message) *message = r.error;
      return true;
    }
  return false;
}

}  // namespace keel::server
