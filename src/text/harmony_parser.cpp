#include "text/harmony_parser.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/bounded_json.h"

namespace keel {

namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kReturn = "<|return|>";
constexpr std::string_view kCall = "<|call|>";
// What ends a message's body (<|start|>: a model that left out <|end|>).
constexpr std::array<std::string_view, 4> kBodyEnds = {kEnd, kReturn, kCall, kStart};
// How a header may begin where no role precedes it (right after the prompt's
// "<|start|>assistant", or after an <|end|> with no <|start|>).
constexpr std::array<std::string_view, 5> kOpenings = {kChannel, " to=", "to=", kConstrain,
                                                       kMessage};
// A header longer than this is not one: the text is content.
constexpr std::size_t kMaxHeader = 256;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// The word after `key` in a header: up to whitespace or the next marker.
std::string word_after(std::string_view header, std::string_view key) {
  const std::size_t p = header.find(key);
  if (p == std::string_view::npos) return {};
  std::string_view rest = header.substr(p + key.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  std::size_t n = 0;
  while (n < rest.size() && !is_ws(rest[n]) && rest.substr(n, 2) != "<|") ++n;
  return std::string(rest.substr(0, n));
}

// Where a held-back tail starts: the last "<|" whose rest may still become a marker.
std::size_t hold_from(std::string_view s) {
  const std::size_t p = s.rfind('<');
  if (p == std::string_view::npos) return s.size();
  const std::string_view tail = s.substr(p);
  for (std::string_view m : kBodyEnds)
    if (tail.size() < m.size() && m.substr(0, tail.size()) == tail) return p;
  return s.size();
}

}  // namespace

std::string harmony_call_text(const ParsedToolCall &call) {
  return std::string(kChannel) + "commentary to=functions." + call.name + " " +
         std::string(kConstrain) + "json" + std::string(kMessage) + call.arguments +
         std::string(kCall);
}

std::vector<HarmonyEvent> HarmonyParser::feed(std::string_view text) {
  buf_.append(text);
  while (step(false)) {
  }
  return std::exchange(out_, {});
}

std::vector<HarmonyEvent> HarmonyParser::finish() {
  while (step(true)) {
  }
  if (state_ == State::kBody) end_body(false);
  state_ = State::kHeader;
  return std::exchange(out_, {});
}

bool HarmonyParser::step(bool final) {
  if (buf_.empty()) return false;
  return state_ == State::kHeader ? header_step(final) : body_step(final);
}

bool HarmonyParser::header_step(bool final) {
  if (!after_start_) {
    // Whitespace between messages is not content.
    const std::size_t ws = std::find_if_not(buf_.begin(), buf_.end(), is_ws) - buf_.begin();
    buf_.erase(0, ws);
    if (buf_.empty()) return false;
  }
  const std::string_view b = buf_;
  if (!after_start_) {
    if (b.starts_with(kStart)) {
      buf_.erase(0, kStart.size());
      after_start_ = true;
      return true;
    }
    if (!final && kStart.starts_with(b)) return false;
  }
  // Not a header: the text is content up to the next message's end.
  auto raw = [&] {
    kind_ = Kind::kContent;
    state_ = State::kBody;
    first_header_ = false;
    after_start_ = false;
    return true;
  };
  const bool need_opening = first_header_ || !after_start_;
  if (need_opening && std::none_of(kOpenings.begin(), kOpenings.end(), [&](std::string_view o) {
        return b.starts_with(o) || (b.size() < o.size() && o.starts_with(b));
      }))
    return raw();
  const std::size_t m = b.find(kMessage);
  const std::string_view header = b.substr(0, m);
  for (std::string_view e : {kEnd, kReturn, kCall, kStart})
    if (header.find(e) != std::string_view::npos) return raw();
  if (m == std::string_view::npos) return final || b.size() > kMaxHeader ? raw() : false;
  begin_body(header);
  buf_.erase(0, m + kMessage.size());
  return true;
}

void HarmonyParser::begin_body(std::string_view header) {
  const std::string channel = word_after(header, kChannel);
  const std::string recipient = word_after(header, "to=");
  name_.clear();
  body_.clear();
  if (recipient.starts_with("functions.") && recipient.size() > 10) {
    kind_ = Kind::kCall;
    name_ = recipient.substr(10);
  } else if (recipient.empty() && channel == "analysis") {
    kind_ = Kind::kReasoning;
  } else {
    kind_ = Kind::kContent;  // final, a commentary preamble, or a built-in tool's input
  }
  state_ = State::kBody;
  first_header_ = false;
}

bool HarmonyParser::body_step(bool final) {
  std::size_t end = std::string::npos;
  std::string_view marker;
  for (std::string_view m : kBodyEnds) {
    const std::size_t p = buf_.find(m);
    if (p < end) end = p, marker = m;
  }
  const Kind k = kind_;
  auto settle = [&](std::string_view text) {
    if (k == Kind::kCall)
      call_body(text);
    else
      emit(k == Kind::kReasoning ? HarmonyEvent::Kind::kReasoning : HarmonyEvent::Kind::kContent,
           text);
  };
  if (end == std::string::npos) {
    const std::size_t keep = final ? buf_.size() : hold_from(buf_);
    settle(std::string_view(buf_).substr(0, keep));
    buf_.erase(0, keep);
    return false;
  }
  settle(std::string_view(buf_).substr(0, end));
  buf_.erase(0, end + (marker == kStart ? 0 : marker.size()));
  end_body(true);
  state_ = State::kHeader;
  after_start_ = false;
  return true;
}

void HarmonyParser::call_body(std::string_view text) {
  if (call_streaming_) {
    if (!text.empty()) out_.push_back({HarmonyEvent::Kind::kCallText, std::string(text), {}});
    return;
  }
  body_.append(text);
  if (!stream_calls_) return;
  const std::size_t first = body_.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || body_[first] != '{') return;
  // The header as harmony_call_text writes it, then the body so far.
  call_streaming_ = true;
  out_.push_back({HarmonyEvent::Kind::kCallText,
                  std::string(kChannel) + "commentary to=functions." + name_ + " " +
                      std::string(kConstrain) + "json" + std::string(kMessage) +
                      body_.substr(first),
                  {}});
  body_.clear();
}

// `marker`: the message ended with a marker (else the output ended).
void HarmonyParser::end_body(bool marker) {
  if (kind_ == Kind::kCall && call_streaming_) {
    // The tool-call parser reads a call that ends with the output as it reads the whole
    // form (unless the output was cut short).
    if (marker) out_.push_back({HarmonyEvent::Kind::kCallText, std::string(kCall), {}});
    call_streaming_ = false;
  } else if (kind_ == Kind::kCall) {
    const std::string_view args = trim(body_);
    // Bounded (depth, keys): the model's text, dumped again below.
    auto j = parse_bounded_json<nlohmann::ordered_json>(args);
    if (j && j->is_object()) {
      HarmonyEvent e;
      e.kind = HarmonyEvent::Kind::kCall;
      e.call = {name_, j->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)};
      out_.push_back(std::move(e));
    } else {
      emit(HarmonyEvent::Kind::kContent, body_);  // not a call after all
    }
    body_.clear();
  }
  message_open_ = false;
}

void HarmonyParser::emit(HarmonyEvent::Kind kind, std::string_view text) {
  if (text.empty()) return;
  const int i = kind == HarmonyEvent::Kind::kReasoning ? 0 : 1;
  std::string t;
  if (!message_open_ && began_[i]) t = "\n\n";  // a new message of the same kind
  t.append(text);
  message_open_ = true;
  began_[i] = true;
  if (!out_.empty() && out_.back().kind == kind) {
    out_.back().text += t;
  } else {
    HarmonyEvent e;
    e.kind = kind;
    e.text = std::move(t);
    out_.push_back(std::move(e));
  }
}

}  // namespace keel
