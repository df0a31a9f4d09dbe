// Incremental server-sent-events parser: bytes in (split anywhere), the data of each
// complete event out. Comment lines (": keepalive") and fields other than data are
// skipped; multi-line data is joined with '\n' as the SSE spec says.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace keel::loadgen {

class SseParser {
 public:
  using OnData = std::function<void(std::string_view data)>;

  void feed(std::string_view bytes, const OnData &on_data);

 private:
  void line(std::string_view l, const OnData &on_data);

  std::string pending_;  // an incomplete line
  std::string data_;     // the data lines of the event being read
  bool has_data_ = false;
};

}  // namespace keel::loadgen
