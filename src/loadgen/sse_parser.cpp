#include "loadgen/sse_parser.h"

namespace keel::loadgen {

void SseParser::feed(std::string_view bytes, const OnData &on_data) {
  pending_.append(bytes);
  std::size_t start = 0;
  for (std::size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view l(pending_.data() + start, nl - start);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    line(l, on_data);
  }
  pending_.erase(0, start);
}

void SseParser::line(std::string_view l, const OnData &on_data) {
  if (l.empty()) {  // a blank line ends the event
    if (has_data_) on_data(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;
  const std::size_t colon = l.find(':');
  const std::string_view field = l.substr(0, colon);
  if (field != "data") return;
  std::string_view value = colon == std::string_view::npos ? "" : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

}  // namespace keel::loadgen
