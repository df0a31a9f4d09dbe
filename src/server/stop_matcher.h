// Finds stop strings in streamed text. Text that might be the start of a stop string is
// held back until it is known not to be, so a client never sees part of a stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace keel::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;     // text safe to send now
    bool hit = false;     // a stop string was found; nothing after it is emitted
    std::string matched;  // which one
  };
  // `match` false (min_tokens not reached yet): the text is not searched for a whole stop
  // string, only a suffix that may begin one is held back.
  Result push(std::string_view text, bool match = true);
  Result flush();  // end of output: release what was held back
  bool hit() const { return hit_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool hit_ = false;
};

}  // namespace keel::server
