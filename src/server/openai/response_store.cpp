#include "server/openai/response_store.h"

namespace keel::server::openai {

ResponseStore::ResponseStore(ResponseStoreLimits limits, Now now)
    : limits_(limits), now_(std::move(now)) {}

std::size_t ResponseStore::size_of(const StoredResponse &r) {
  // The serialized size: what the entry costs, within a small factor of its memory.
  return r.response.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).size() +
         r.conversation.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
             .size();
}

void ResponseStore::erase_locked(List::iterator it) {
  bytes_ -= it->bytes;
  index_.erase(it->id);
  entries_.erase(it);
}

void ResponseStore::evict_locked() {
  const auto now = now_();
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->expires <= now) erase_locked(it);
    it = next;
  }
  while (!entries_.empty() && (entries_.size() > limits_.max_entries || bytes_ > limits_.max_bytes))
    erase_locked(entries_.begin());
}

void ResponseStore::put(const std::string &id, StoredResponse r) {
  const std::size_t n = size_of(r);
  std::lock_guard lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) erase_locked(it->second);
  if (n > limits_.max_bytes || limits_.max_entries == 0) {
    evict_locked();
    return;
  }
  entries_.push_back(Entry{id, std::move(r), n, now_() + limits_.ttl});
  index_[id] = std::prev(entries_.end());
  bytes_ += n;
  evict_locked();
}

std::optional<StoredResponse> ResponseStore::get(const std::string &id) {
  std::lock_guard lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  if (it->second->expires <= now_()) {
    erase_locked(it->second);
    return std::nullopt;
  }
  return it->second->value;
}

bool ResponseStore::update(const std::string &id, nlohmann::ordered_json response,
                           nlohmann::ordered_json conversation) {
  std::lock_guard lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  Entry &e = *it->second;
  bytes_ -= e.bytes;
  e.value.response = std::move(response);
  e.value.conversation = std::move(conversation);
  e.value.cancel = nullptr;
  e.bytes = size_of(e.value);
  bytes_ += e.bytes;
  if (e.bytes > limits_.max_bytes) erase_locked(it->second);
  evict_locked();
  return true;
}

bool ResponseStore::erase(const std::string &id) {
  std::lock_guard lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  erase_locked(it->second);
  return true;
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
