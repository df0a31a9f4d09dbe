// Stored Responses API responses (store: true), for GET / DELETE / cancel and for
// previous_response_id. Bounded three ways: an entry count, a byte total and a TTL;
// the oldest entries go first when a bound is reached, so the store never grows
// without limit under load. Thread-safe; the clock is injected so tests control time.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace keel::server::openai {

struct ResponseStoreLimits {
  std::size_t max_entries = 1024;
  std::size_t max_bytes = 64u << 20;  // response + conversation JSON, summed
  std::chrono::seconds ttl{3600};
};

struct StoredResponse {
  nlohmann::ordered_json response;      // the response object as GET returns it
  nlohmann::ordered_json conversation;  // input items (previous turns resolved) + output items
  std::size_t inputs = 0;               // conversation[0, inputs) was the input (for input_items)
  std::function<void()> cancel;         // set while a background response runs
};

class ResponseStore {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;

  explicit ResponseStore(ResponseStoreLimits limits = {}, Now now = Clock::now);

  // Inserts or replaces `id` (as newest), then evicts expired and oldest entries until
  // the bounds hold. An entry larger than max_bytes alone is not kept.
  void put(const std::string &id, StoredResponse r);
  // A copy, or nullopt when unknown or expired.
  std::optional<StoredResponse> get(const std::string &id);
  // Updates the stored response object (a background response finishing) if present;
  // the entry keeps its age. Returns false when it is gone (deleted or evicted).
  bool update(const std::string &id, nlohmann::ordered_json response,
              nlohmann::ordered_json conversation);
  bool erase(const std::string &id);
  // An item (input or output, by its "id") of a stored conversation, for
  // item_reference inputs; nullopt when no live entry holds it.
  std::optional<nlohmann::ordered_json> find_item(const std::string &item_id);

  std::size_t size() const;
  std::size_t bytes() const;

 private:
  struct Entry {
    std::string id;
    StoredResponse value;
    std::size_t bytes = 0;
    Clock::time_point expires;
    std::vector<std::string> item_ids;  // indexed in items_
  };
  using List = std::list<Entry>;  // oldest first

  static std::size_t size_of(const StoredResponse &r);
  void evict_locked();
  void erase_locked(List::iterator it);
  void index_items_locked(Entry &e);
  void unindex_items_locked(Entry &e);

  ResponseStoreLimits limits_;
  Now now_;
  mutable std::mutex mu_;
  List entries_;
  std::unordered_map<std::string, List::iterator> index_;
  std::unordered_map<std::string, std::string> items_;  // item id -> response id
  std::size_t bytes_ = 0;
};

}  // namespace keel::server::openai
