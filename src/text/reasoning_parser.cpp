#include "text/reasoning_parser.h"

#include <algorithm>

namespace keel {

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::size_t skip_space(std::string_view s, std::size_t from = 0) {
  while (from < s.size() && is_space(s[from])) ++from;
  return from;
}

// Length of the longest suffix of `s` that is a proper prefix of `marker`.
std::size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  const std::size_t most = std::min(s.size(), marker.size() - 1);
  for (std::size_t n = most; n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

ReasoningParser::ReasoningParser(bool starts_inside, ReasoningMarkers markers)
    : markers_(std::move(markers)), state_(starts_inside ? State::kReasoning : State::kStart) {}

ReasoningParser ReasoningParser::for_format(ToolCallFormat format, bool starts_inside) {
  ReasoningParser p(starts_inside);
  if (format == ToolCallFormat::kHarmony) {
    p.harmony_.emplace();
    p.state_ = State::kStart;
  }
  return p;
}

ReasoningSplit ReasoningParser::from_harmony(std::vector<HarmonyEvent> events) {
  ReasoningSplit out;
  for (auto &e : events) {
    if (e.kind == HarmonyEvent::Kind::kReasoning) {
      out.reasoning += e.text;
      state_ = State::kReasoning;
    } else {
      // kCallText: a streamed call's markup and body (harmony_call_text's form).
      out.content += e.kind == HarmonyEvent::Kind::kCall ? harmony_call_text(e.call) : e.text;
      state_ = State::kContent;
      closed_ = true;
    }
  }
  return out;
}

ReasoningSplit ReasoningParser::feed(std::string_view text) {
  if (harmony_) return from_harmony(harmony_->feed(text));
  buf_.append(text);
  ReasoningSplit out;
  run(false, out);
  return out;
}

ReasoningSplit ReasoningParser::finish() {
  if (harmony_) return from_harmony(harmony_->finish());
  ReasoningSplit out;
  run(true, out);
  return out;
}

void ReasoningParser::emit_reasoning(std::string_view text, ReasoningSplit &out) {
  if (!reasoning_begun_) text.remove_prefix(skip_space(text));
  if (text.empty()) return;
  reasoning_begun_ = true;
  out.reasoning.append(text);
}

void ReasoningParser::run(bool final, ReasoningSplit &out) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        // Undecided: leading whitespace, then either the open marker or the answer.
        const std::size_t lead = skip_space(buf_);
        const std::string_view rest = std::string_view(buf_).substr(lead);
        if (rest.size() >= markers_.open.size()) {
          if (rest.substr(0, markers_.open.size()) == markers_.open) {
            buf_.erase(0, lead + markers_.open.size());
            state_ = State::kReasoning;
          } else {
            state_ = State::kContent;
          }
          continue;
        }
        const bool may_open = std::string_view(markers_.open).substr(0, rest.size()) == rest;
        if (may_open && !final) return;  // wait for more
        state_ = State::kContent;
        continue;
      }
      case State::kReasoning: {
        const std::size_t at = buf_.find(markers_.close);
        if (at != std::string::npos) {
          std::string_view body = std::string_view(buf_).substr(0, at);
          while (!body.empty() && is_space(body.back())) body.remove_suffix(1);
          emit_reasoning(body, out);
          buf_.erase(0, at + markers_.close.size());
          state_ = State::kAfterClose;
          closed_ = true;
          continue;
        }
        if (final) {
          std::string_view body = buf_;
          while (!body.empty() && is_space(body.back())) body.remove_suffix(1);
          emit_reasoning(body, out);
          buf_.clear();
          return;
        }
        // Settle all but a possible partial close marker and trailing whitespace.
        std::size_t keep = partial_marker_suffix(buf_, markers_.close);
        std::size_t end = buf_.size() - keep;
        while (end > 0 && is_space(buf_[end - 1])) --end;
        emit_reasoning(std::string_view(buf_).substr(0, end), out);
        buf_.erase(0, end);
        return;
      }
      case State::kAfterClose: {
        const std::size_t lead = skip_space(buf_);
        buf_.erase(0, lead);
        if (buf_.empty()) return;  // only whitespace so far
        state_ = State::kContent;
        continue;
      }
      case State::kContent:
        out.content += buf_;
        buf_.clear();
        return;
    }
  }
}

bool prompt_opens_reasoning(std::string_view prompt, const ReasoningMarkers &markers) {
  const std::size_t open = prompt.rfind(markers.open);
  if (open == std::string_view::npos) return false;
  const std::size_t close = prompt.rfind(markers.close);
  return close == std::string_view::npos || close < open;
}

}  // namespace keel
