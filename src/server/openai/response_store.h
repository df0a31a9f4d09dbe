// Stored Responses API responses (store: true), for GET / DELETE / cancel and for
// previous_response_id. Bounded three ways: an entry count, a byte total and a TTL;
// the oldest entries go first when a bound is reached, so the store never grows
// without limit under load. Thread-safe; the clock is injected so tests control time.
//
// The store is where a response's status moves (response_status.h): cancel() and
// settle() are the only writes to a stored response's state, both under the store's
// lock, and a terminal status is never overwritten. So a cancel that races the
// generation's end leaves the response cancelled whichever lands first, and a
// generation that ends after its entry was evicted or deleted does not bring it back.
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

#include "server/openai/response_status.h"

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

// What cancel() found.
enum class CancelOutcome {
  kGone,       // no live entry (never stored, deleted, evicted or expired)
  kCancelled,  // it was running: now cancelled, and its generation told to stop
  kEnded,      // it had already reached a terminal state, which it keeps
};

struct CancelResult {
  CancelOutcome outcome = CancelOutcome::kGone;
  nlohmann::ordered_json response;  // the stored response after the call (not kGone)
};

// What settle() did.
enum class SettleOutcome {
  kSettled,       // the final response was stored
  kKeptTerminal,  // the entry had ended first (cancelled): it keeps that status
  kGone,          // no live entry: nothing stored
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
  // A background response's generation ended: stores its final response and
  // conversation if the entry is still there (it keeps its age). When the entry had
  // already reached a terminal state (a cancel landed first), that status stays, with
  // its error and incomplete_details; the output and usage the generation produced
  // are still recorded. The running entry's cancel hook is dropped either way.
  SettleOutcome settle(const std::string &id, nlohmann::ordered_json response,
                       nlohmann::ordered_json conversation);
  // Cancels a running entry: its status becomes "cancelled" at once (for every later
  // get) and its cancel hook is called, outside the lock. A terminal entry is left as
  // it is.
  CancelResult cancel(const std::string &id);
  // Removes an entry; a running one's generation is told to stop (outside the lock).
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
  // Evicting or erasing a running entry hands back its cancel hook, for the caller to
  // call once it released the lock (a hook may reach code that takes the lock again).
  using Hooks = std::vector<std::function<void()>>;
  void evict_locked(Hooks &stop);
  void erase_locked(List::iterator it, Hooks &stop);
  static void run(Hooks &stop);
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
