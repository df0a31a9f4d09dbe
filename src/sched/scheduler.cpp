#include "sched/scheduler.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace keel {

Scheduler::Scheduler(const SchedulerConfig &config, KvCacheManager &kv) : config_(config), kv_(kv) {
  if (config.max_num_seqs <= 0 || config.max_chunk_tokens <= 0)
    throw Error(ErrorCode::kInvalidArgument,
                "scheduler: max_num_seqs and max_chunk_tokens must be positive");
  // Every running request must fit its decode token into every step.
  if (config.max_num_batched_tokens < config.max_num_seqs)
    throw Error(ErrorCode::kInvalidArgument, "scheduler: max_num_batched_tokens (" +
                                                 std::to_string(config.max_num_batched_tokens) +
                                                 ") must be at least max_num_seqs (" +
                                                 std::to_string(config.max_num_seqs) + ")");
  running_.reserve(config.max_num_seqs + 1);
}

SchedRequest &Scheduler::add_request(RequestId id, std::vector<TokenId> prompt,
                                     bool use_prefix_cache, std::string extra_keys,
                                     std::uint64_t group) {
  if (prompt.empty())
    throw Error(ErrorCode::kInvalidArgument, "scheduler: request prompt is empty");
  if (requests_.count(id))
    throw Error(ErrorCode::kInvalidArgument,
                "scheduler: duplicate request id " + std::to_string(id.value));
  auto r = std::make_unique<SchedRequest>();
  r->id = id;
  r->arrival = next_arrival_++;
  r->group = group != 0 ? group : id.value;
  r->num_prompt_tokens = static_cast<std::int32_t>(prompt.size());
  r->tokens = std::move(prompt);
  r->use_prefix_cache = use_prefix_cache;
  r->extra_keys = std::move(extra_keys);
  SchedRequest &ref = *r;
  requests_.emplace(id, std::move(r));
  ++groups_[ref.group].members;
  push_waiting(&ref);
  return ref;
}

SchedRequest *Scheduler::get(RequestId id) {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

const SchedRequest *Scheduler::find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

template <typename Fn>
void Scheduler::change_group(const SchedRequest *r, Fn change) {
  Group &g = groups_.at(r->group);
  if (!g.waiting.empty()) ready_.erase(ReadyKey{g.running, g.waiting.begin()->first, r->group});
  change(g);
  if (!g.waiting.empty()) ready_.insert(ReadyKey{g.running, g.waiting.begin()->first, r->group});
}

std::int32_t Scheduler::group_running(std::uint64_t group) const {
  auto it = groups_.find(group);
  return it == groups_.end() ? 0 : it->second.running;
}

void Scheduler::insert_running(SchedRequest *r) {
  auto pos = std::upper_bound(
      running_.begin(), running_.end(), r,
      [](const SchedRequest *a, const SchedRequest *b) { return a->arrival < b->arrival; });
  running_.insert(pos, r);
  change_group(r, [](Group &g) { ++g.running; });
}

void Scheduler::erase_running(SchedRequest *r) {
  auto it = std::find(running_.begin(), running_.end(), r);
  KEEL_CHECK(it != running_.end());
  running_.erase(it);
  change_group(r, [](Group &g) { --g.running; });
}

void Scheduler::insert_loading(SchedRequest *r) {
  loading_.emplace(r->arrival, r);
  change_group(r, [](Group &g) { ++g.running; });
}

void Scheduler::erase_loading(SchedRequest *r) {
  KEEL_CHECK(loading_.erase(r->arrival) == 1);
  change_group(r, [](Group &g) { --g.running; });
}

void Scheduler::push_waiting(SchedRequest *r) {
  waiting_.emplace(r->arrival, r);
  change_group(r, [r](Group &g) { g.waiting.emplace(r->arrival, r); });
  (r->state == RequestState::kPreempted ? num_preempted_waiting_ : num_waiting_)++;
}

void Scheduler::erase_waiting(SchedRequest *r) {
  KEEL_CHECK(waiting_.erase(r->arrival) == 1);
  change_group(r, [r](Group &g) { KEEL_CHECK(g.waiting.erase(r->arrival) == 1); });
  (r->state == RequestState::kPreempted ? num_preempted_waiting_ : num_waiting_)--;
}

SchedRequest *Scheduler::next_waiting() const {
  if (ready_.empty()) return nullptr;
  return groups_.at(std::get<2>(*ready_.begin())).waiting.begin()->second;
}

SchedRequest *Scheduler::pick_victim() const {
  std::int32_t most = 0;
  for (const SchedRequest *r : running_) most = std::max(most, groups_.at(r->group).running);
  for (auto it = running_.rbegin(); it != running_.rend(); ++it)
    if (groups_.at((*it)->group).running == most) return *it;
  return nullptr;
}

SchedRequest *Scheduler::victim_for(const SchedRequest *r, std::uint64_t step) const {
  const std::int32_t mine = groups_.at(r->group).running;
  SchedRequest *best = nullptr;
  std::int32_t most = mine + 1;  // a victim's group must have more than this
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    const std::int32_t n = groups_.at((*it)->group).running;
    if (n > most && (*it)->admitted_step != step) {
      best = *it;
      most = n;
    }
  }
  return best;
}

bool Scheduler::finish(RequestId id, RequestState finished_state) {
  SchedRequest *r = get(id);
  if (r == nullptr) return false;
  if (!is_finished(finished_state))
    throw Error(ErrorCode::kInternal, "scheduler: finish with a live state");
  if (!is_legal_transition(r->state, finished_state))
    transition(r->state, finished_state);  // throws, naming both states
  switch (r->state) {
    case RequestState::kRunning:
      erase_running(r);
      break;
    case RequestState::kWaiting:
    case RequestState::kPreempted:
      erase_waiting(r);
      break;
    case RequestState::kLoadingCache:
      erase_loading(r);
      break;
    default:
      break;
  }
  transition(r->state, finished_state);
  kv_.free(id);
  if (auto g = groups_.find(r->group); --g->second.members == 0) groups_.erase(g);
  requests_.erase(id);
  return true;
}

void Scheduler::preempt(SchedRequest *victim, StepPlan &plan, std::int32_t &budget) {
  if (victim->scheduled_step == plan.step) {  // drop its work from this step
    auto it = std::find_if(plan.seqs.begin(), plan.seqs.end(),
                           [&](const ScheduledSeq &s) { return s.id == victim->id; });
    KEEL_CHECK(it != plan.seqs.end());
    budget += it->num_tokens;
    plan.total_tokens -= it->num_tokens;
    plan.seqs.erase(it);
    victim->scheduled_step = 0;
  }
  erase_running(victim);
  kv_.free(victim->id);
  victim->num_computed_tokens = 0;
  transition(victim->state, RequestState::kPreempted);
  ++victim->num_preemptions;
  ++total_preemptions_;
  push_waiting(victim);
  plan.preempted.push_back(victim->id);
}

void Scheduler::schedule_running(SchedRequest *r, StepPlan &plan, std::int32_t &budget,
                                 bool &preempted_any) {
  const std::int32_t remaining = r->num_tokens() - r->num_computed_tokens;
  const std::int32_t n = std::min({remaining, config_.max_chunk_tokens, budget});
  if (n <= 0) return;
  while (!kv_.allocate_slots(r->id, r->num_computed_tokens + n)) {
    SchedRequest *victim = pick_victim();  // r itself at the latest
    preempt(victim, plan, budget);
    preempted_any = true;
    if (victim == r) return;
  }
  ScheduledSeq s;
  s.id = r->id;
  s.start_pos = r->num_computed_tokens;
  s.num_tokens = n;
  s.samples = r->num_computed_tokens + n == r->num_tokens();
  plan.seqs.push_back(s);
  plan.total_tokens += n;
  budget -= n;
  r->scheduled_step = plan.step;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  plan.step = ++step_;
  std::int32_t budget = config_.max_num_batched_tokens;
  bool preempted_any = false;

  // 1. Decodes first: one token for each running request that has all but one computed.
  //    Over a snapshot: a victim may be any running request, one this loop has passed or
  //    not reached (then skipped).
  std::vector<SchedRequest *> snapshot = running_;
  for (SchedRequest *r : snapshot)
    if (r->state == RequestState::kRunning && r->num_tokens() - r->num_computed_tokens == 1)
      schedule_running(r, plan, budget, preempted_any);
  // 2. Then the next chunk of running requests that are still prefilling, those of the
  //    groups with the fewest running first (then by arrival).
  snapshot.clear();
  for (SchedRequest *r : running_)
    if (r->scheduled_step != plan.step && r->num_tokens() - r->num_computed_tokens > 1)
      snapshot.push_back(r);
  std::stable_sort(snapshot.begin(), snapshot.end(),
                   [this](const SchedRequest *a, const SchedRequest *b) {
                     return groups_.at(a->group).running < groups_.at(b->group).running;
                   });
  for (SchedRequest *r : snapshot) {
    if (budget <= 0) break;
    if (r->state == RequestState::kRunning && r->scheduled_step != plan.step)
      schedule_running(r, plan, budget, preempted_any);
  }
  // 3. Admission, fairly by group (next_waiting). The request it picks waits for blocks
  //    and a seat, or takes them from a group with at least two more running; nothing
  //    overtakes it.
  if (preempted_any) {
    add_drafts(plan, budget);
    return plan;
  }
  std::int32_t admitted_now = 0;
  while (!waiting_.empty() && budget > 0 &&
         (admission_limit_ < 0 || admitted_now < admission_limit_)) {
    SchedRequest *r = next_waiting();
    if (static_cast<std::int32_t>(running_.size()) >= config_.max_num_seqs) {
      SchedRequest *victim = victim_for(r, plan.step);
      if (victim == nullptr) break;
      preempt(victim, plan, budget);
      continue;  // budget and blocks came back; r is still the one to admit
    }
    PrefixHit hit;
    if (r->use_prefix_cache) hit = kv_.get_computed_blocks(r->tokens, r->extra_keys);
    if (tiers_ != nullptr && r->use_prefix_cache && !r->skip_tiers) {
      const int admitted = admit_loading(r, hit, plan);
      if (admitted < 0) {  // no blocks: from a bigger group, or the pick waits
        SchedRequest *victim = victim_for(r, plan.step);
        if (victim == nullptr) break;
        preempt(victim, plan, budget);
        continue;
      }
      if (admitted > 0) {
        r->admitted_step = plan.step;
        ++admitted_now;
        continue;
      }
    }
    const std::int32_t computed = hit.num_tokens;
    const std::int32_t n = std::min({r->num_tokens() - computed, config_.max_chunk_tokens, budget});
    std::optional<BlockCopy> copy;
    if (!kv_.allocate_slots(r->id, computed + n, &hit, &copy)) {
      SchedRequest *victim = victim_for(r, plan.step);
      if (victim == nullptr) break;  // the pick waits for blocks
      preempt(victim, plan, budget);
      continue;  // its freed blocks may change the prefix hit: look again
    }
    erase_waiting(r);
    r->admitted_step = plan.step;
    ++admitted_now;
    transition(r->state, RequestState::kRunning);
    r->num_computed_tokens = computed;
    if (r->num_cached_prompt_tokens < 0) r->num_cached_prompt_tokens = computed;
    insert_running(r);
    ScheduledSeq s;
    s.id = r->id;
    s.start_pos = computed;
    s.num_tokens = n;
    s.samples = computed + n == r->num_tokens();
    s.copy = copy;
    plan.seqs.push_back(s);
    plan.total_tokens += n;
    budget -= n;
    r->scheduled_step = plan.step;
  }
  add_drafts(plan, budget);
  return plan;
}

void Scheduler::add_drafts(StepPlan &plan, std::int32_t &budget) {
  for (ScheduledSeq &s : plan.seqs) {
    if (budget <= 0) return;
    SchedRequest *r = get(s.id);
    if (r->draft.empty()) continue;
    std::vector<TokenId> draft = std::move(r->draft);
    r->draft.clear();
    if (r->draft_for != r->num_tokens() || s.num_tokens != 1 || !s.samples) continue;
    const auto n = std::min(static_cast<std::int32_t>(draft.size()), budget);
    if (!kv_.allocate_slots(r->id, s.start_pos + 1 + n)) continue;  // never preempts
    draft.resize(n);
    s.draft = std::move(draft);
    s.num_tokens += n;
    plan.total_tokens += n;
    budget -= n;
  }
}

int Scheduler::admit_loading(SchedRequest *r, const PrefixHit &hit, StepPlan &plan) {
  const std::int32_t bs = kv_.block_size();
  const auto hit_blocks = static_cast<std::int32_t>(hit.blocks.size());
  // The last token is always computed (for its logits), so at most n - 1 tokens load;
  // the blocks needed for them bound the lookup.
  const std::int32_t n = r->num_tokens();
  const std::int32_t max_blocks = (n - 1 + bs - 1) / bs - hit_blocks;
  if (max_blocks <= 0) return 0;
  auto hashes = kv_.lower_tier_chain(r->tokens, hit, r->extra_keys, *tiers_, max_blocks);
  if (hashes.empty()) return 0;
  const std::int32_t tokens =
      std::min((hit_blocks + static_cast<std::int32_t>(hashes.size())) * bs, n - 1);
  if (!kv_.allocate_slots(r->id, tokens, &hit)) return -1;
  erase_waiting(r);
  transition(r->state, RequestState::kLoadingCache);
  r->loading_tokens = tokens;
  r->restoring_tokens = tokens - hit.num_tokens;
  insert_loading(r);
  TierLoad load;
  load.id = r->id;
  const auto blocks = kv_.blocks(r->id);
  KEEL_CHECK(static_cast<std::int32_t>(blocks.size()) ==
             hit_blocks + static_cast<std::int32_t>(hashes.size()));
  load.blocks.assign(blocks.begin() + hit_blocks, blocks.end());
  load.hashes = std::move(hashes);
  plan.loads.push_back(std::move(load));
  return 1;
}

void Scheduler::on_step_done(const StepPlan &plan) {
  for (const ScheduledSeq &s : plan.seqs) {
    SchedRequest *r = get(s.id);
    KEEL_CHECK(r != nullptr && r->state == RequestState::kRunning);
    KEEL_CHECK(r->num_computed_tokens == s.start_pos);
    r->num_computed_tokens += s.num_tokens - static_cast<std::int32_t>(s.draft.size());
    r->num_stored_prompt_tokens += kv_.cache_full_blocks(r->id, r->tokens, r->num_computed_tokens,
                                                         r->extra_keys, r->num_prompt_tokens);
  }
  kv_.end_step();
}

void Scheduler::append_token(RequestId id, TokenId token, bool kv_computed) {
  SchedRequest *r = get(id);
  KEEL_CHECK(r != nullptr && r->state == RequestState::kRunning);
  KEEL_CHECK(r->num_computed_tokens == r->num_tokens());
  r->tokens.push_back(token);
  if (kv_computed) {
    KEEL_CHECK(static_cast<std::int32_t>(kv_.blocks(id).size()) * kv_.block_size() >=
               r->num_tokens());
    ++r->num_computed_tokens;
  }
}

void Scheduler::set_draft(RequestId id, std::vector<TokenId> draft) {
  SchedRequest *r = get(id);
  if (r == nullptr) return;
  r->draft = std::move(draft);
  r->draft_for = r->num_tokens();
}

void Scheduler::settle_drafts(RequestId id) {
  SchedRequest *r = get(id);
  if (r == nullptr || r->state != RequestState::kRunning) return;
  r->num_stored_prompt_tokens += kv_.cache_full_blocks(r->id, r->tokens, r->num_computed_tokens,
                                                       r->extra_keys, r->num_prompt_tokens);
  kv_.truncate(r->id, r->num_tokens());
}

bool Scheduler::start_loading(RequestId id, std::int32_t num_tokens) {
  SchedRequest *r = get(id);
  if (r == nullptr)
    throw Error(ErrorCode::kNotFound, "scheduler: unknown request " + std::to_string(id.value));
  if (r->state != RequestState::kWaiting && r->state != RequestState::kPreempted)
    throw Error(ErrorCode::kInternal,
                std::string("scheduler: start_loading in state ") + request_state_name(r->state));
  // The last token is always computed, for its logits.
  if (num_tokens <= 0 || num_tokens >= r->num_tokens())
    throw Error(ErrorCode::kInvalidArgument, "scheduler: tokens to load out of range");
  if (!kv_.allocate_slots(r->id, num_tokens)) return false;
  erase_waiting(r);
  transition(r->state, RequestState::kLoadingCache);
  r->loading_tokens = num_tokens;
  r->restoring_tokens = num_tokens;
  insert_loading(r);
  return true;
}

void Scheduler::finish_loading(RequestId id, bool ok, std::int32_t restored_tokens) {
  SchedRequest *r = get(id);
  if (r == nullptr) return;  // aborted while loading
  KEEL_CHECK(r->state == RequestState::kLoadingCache);
  erase_loading(r);
  if (ok) {
    if (restored_tokens >= 0 && restored_tokens < r->restoring_tokens) {
      r->loading_tokens -= r->restoring_tokens - restored_tokens;
      r->restoring_tokens = restored_tokens;
    }
    transition(r->state, RequestState::kRunning);
    r->num_computed_tokens = r->loading_tokens;
    if (r->num_cached_prompt_tokens < 0)
      r->num_cached_prompt_tokens = std::min(r->loading_tokens, r->num_prompt_tokens);
    kv_.count_restored(r->restoring_tokens);
    if (r->use_prefix_cache)  // restored blocks are cached on the device again
      kv_.cache_full_blocks(r->id, r->tokens, r->num_computed_tokens, r->extra_keys);
    insert_running(r);
  } else {
    kv_.free(r->id);
    transition(r->state, RequestState::kWaiting);
    r->skip_tiers = true;
    push_waiting(r);
  }
  r->loading_tokens = 0;
  r->restoring_tokens = 0;
}

void Scheduler::check_invariants() const {
  kv_.check_invariants();
  std::int32_t waiting = 0, preempted = 0;
  for (const auto &[arrival, r] : waiting_) {
    KEEL_CHECK(r->arrival == arrival);
    KEEL_CHECK(!kv_.holds_blocks(r->id));
    if (r->state == RequestState::kWaiting)
      ++waiting;
    else if (r->state == RequestState::kPreempted)
      ++preempted;
    else
      KEEL_CHECK(!"waiting queue holds a request in another state");
  }
  KEEL_CHECK(waiting == num_waiting_ && preempted == num_preempted_waiting_);
  const std::int32_t bs = kv_.block_size();
  for (std::size_t i = 0; i < running_.size(); ++i) {
    const SchedRequest *r = running_[i];
    KEEL_CHECK(r->state == RequestState::kRunning);
    KEEL_CHECK(i == 0 || running_[i - 1]->arrival < r->arrival);
    KEEL_CHECK(static_cast<std::int32_t>(kv_.blocks(r->id).size()) * bs >= r->num_computed_tokens);
  }
  for (const auto &[arrival, r] : loading_) KEEL_CHECK(r->state == RequestState::kLoadingCache);
  KEEL_CHECK(waiting_.size() + running_.size() + loading_.size() == requests_.size());
  // Groups: counts and waiting lists rebuilt from the requests, and admission's order.
  std::unordered_map<std::uint64_t, Group> groups;
  for (const auto &[id, r] : requests_) ++groups[r->group].members;
  for (const SchedRequest *r : running_) ++groups[r->group].running;
  for (const auto &[arrival, r] : loading_) ++groups[r->group].running;
  for (const auto &[arrival, r] : waiting_) groups[r->group].waiting.emplace(arrival, r);
  KEEL_CHECK(groups.size() == groups_.size());
  std::set<ReadyKey> ready;
  for (const auto &[id, g] : groups) {
    auto it = groups_.find(id);
    KEEL_CHECK(it != groups_.end());
    KEEL_CHECK(it->second.members == g.members && it->second.running == g.running &&
               it->second.waiting == g.waiting);
    if (!g.waiting.empty()) ready.insert(ReadyKey{g.running, g.waiting.begin()->first, id});
  }
  KEEL_CHECK(ready == ready_);
  KEEL_CHECK(kv_.num_requests() <= static_cast<std::int32_t>(running_.size() + loading_.size()));
}

}  // namespace keel
