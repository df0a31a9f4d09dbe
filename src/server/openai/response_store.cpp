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

void ResponseStore::erase_locked(List::iterator it) {
  unindex_items_locked(*it);
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
  index_items_locked(entries_.back());
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
  unindex_items_locked(e);
  e.value.response = std::move(response);
  e.value.conversation = std::move(conversation);
  e.value.cancel = nullptr;
  e.bytes = size_of(e.value);
  index_items_locked(e);
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
