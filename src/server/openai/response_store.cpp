#include "server/openai/response_store.h"

#include <string>

namespace keel::server::openai {

ResponseStore::ResponseStore(ResponseStoreLimits limits, Now now)
    : limits_(limits), now_(std::move(now)) {}

std::size_t ResponseStore::size_of(const StoredResponse &r) {
  // The serialized size: what the entry costs, within a small factor of its memory.
  return r.response.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).size() +
         r.conversation.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
             .size();
}

void ResponseStore::index_items_locked(Entry &e) {
  for (const auto &item : e.value.conversation) {
    auto id = item.find("id");
    if (id == item.end() || !id->is_string()) continue;
    items_[id->get<std::string>()] = e.id;  // a later response holding it wins
    e.item_ids.push_back(id->get<std::string>());
  }
}

void ResponseStore::unindex_items_locked(Entry &e) {
  for (const auto &item_id : e.item_ids)
    if (auto it = items_.find(item_id); it != items_.end() && it->second == e.id) items_.erase(it);
  e.item_ids.clear();
}

namespace {

std::optional<ResponseStatus> status_of(const nlohmann::ordered_json &response) {
  auto it = response.find("status");
  if (it == response.end() || !it->is_string()) return std::nullopt;
  return parse_response_status(it->get<std::string>());
}

bool ended(const StoredResponse &r) {
  const auto s = status_of(r.response);
  return s && is_terminal(*s);
}

}  // namespace

void ResponseStore::run(Hooks &stop) {
  for (auto &hook : stop)
    if (hook) hook();
  stop.clear();
}

void ResponseStore::erase_locked(List::iterator it, Hooks &stop) {
  if (it->value.cancel && !ended(it->value)) stop.push_back(std::move(it->value.cancel));
  unindex_items_locked(*it);
  bytes_ -= it->bytes;
  index_.erase(it->id);
  entries_.erase(it);
}

void ResponseStore::evict_locked(Hooks &stop) {
  const auto now = now_();
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->expires <= now) erase_locked(it, stop);
    it = next;
  }
  while (!entries_.empty() && (entries_.size() > limits_.max_entries || bytes_ > limits_.max_bytes))
    erase_locked(entries_.begin(), stop);
}

void ResponseStore::put(const std::string &id, StoredResponse r) {
  const std::size_t n = size_of(r);
  Hooks stop;
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(id); it != index_.end()) erase_locked(it->second, stop);
    if (n > limits_.max_bytes || limits_.max_entries == 0) {
      evict_locked(stop);
    } else {
      entries_.push_back(Entry{id, std::move(r), n, now_() + limits_.ttl});
      index_[id] = std::prev(entries_.end());
      index_items_locked(entries_.back());
      bytes_ += n;
      evict_locked(stop);
    }
  }
  run(stop);
}

std::optional<StoredResponse> ResponseStore::get(const std::string &id) {
  Hooks stop;
  std::optional<StoredResponse> out;
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return std::nullopt;
    if (it->second->expires <= now_())
      erase_locked(it->second, stop);
    else
      out = it->second->value;
  }
  run(stop);
  return out;
}

SettleOutcome ResponseStore::settle(const std::string &id, nlohmann::ordered_json response,
                                    nlohmann::ordered_json conversation) {
  Hooks stop;
  SettleOutcome outcome = SettleOutcome::kSettled;
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return SettleOutcome::kGone;
    Entry &e = *it->second;
    const auto from = status_of(e.value.response);
    const auto to = status_of(response);
    if (from && (to ? !may_transition(*from, *to) : is_terminal(*from))) {
      // The state the entry reached first stays: status and its details.
      // (A terminal state with no error or incomplete_details has none: null.)
      response["status"] = e.value.response["status"];
      for (const char *key : {"error", "incomplete_details"}) {
        auto k = e.value.response.find(key);
        response[key] = k != e.value.response.end() ? *k : nlohmann::ordered_json(nullptr);
      }
      outcome = SettleOutcome::kKeptTerminal;
    }
    bytes_ -= e.bytes;
    unindex_items_locked(e);
    e.value.response = std::move(response);
    e.value.conversation = std::move(conversation);
    e.value.cancel = nullptr;
    e.bytes = size_of(e.value);
    index_items_locked(e);
    bytes_ += e.bytes;
    if (e.bytes > limits_.max_bytes) erase_locked(it->second, stop);
    evict_locked(stop);
  }
  run(stop);
  return outcome;
}

CancelResult ResponseStore::cancel(const std::string &id) {
  CancelResult result;
  std::function<void()> hook;
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(id);
    if (it == index_.end() || it->second->expires <= now_()) return result;
    StoredResponse &r = it->second->value;
    if (ended(r)) {
      result.outcome = CancelOutcome::kEnded;
    } else {
      r.response["status"] = response_status_name(ResponseStatus::kCancelled);
      hook = std::move(r.cancel);
      r.cancel = nullptr;
      result.outcome = CancelOutcome::kCancelled;
    }
    result.response = r.response;
  }
  if (hook) hook();  // outside the lock: the generation may settle from inside it
  return result;
}

bool ResponseStore::erase(const std::string &id) {
  Hooks stop;
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return false;
    erase_locked(it->second, stop);
  }
  run(stop);
  return true;
}

std::optional<nlohmann::ordered_json> ResponseStore::find_item(const std::string &item_id) {
  std::lock_guard lock(mu_);
  auto owner = items_.find(item_id);
  if (owner == items_.end()) return std::nullopt;
  auto it = index_.find(owner->second);
  if (it == index_.end() || it->second->expires <= now_()) return std::nullopt;
  for (const auto &item : it->second->value.conversation)
    if (item.contains("id") && item["id"] == item_id) return item;
  return std::nullopt;
}

std::size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

std::size_t ResponseStore::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace keel::server::openai
