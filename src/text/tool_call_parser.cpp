#include "text/tool_call_parser.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "core/bounded_json.h"

namespace keel {

using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kHarmonyOpen = "<|channel|>commentary to=functions.";
constexpr std::string_view kHarmonyMessage = "<|message|>";
constexpr std::string_view kHarmonyCall = "<|call|>";
// Deeper JSON is not taken as a call: re-serializing it recurses.
constexpr int kMaxDepth = 64;
// A call object's head ({"name": N, "arguments": {) longer than this is not streamed
// (the call comes out whole once complete): it bounds the rescans of an unsettled head.
constexpr std::size_t kMaxHead = 1024;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::size_t skip_ws(std::string_view s, std::size_t i = 0) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

std::string_view trim(std::string_view s) {
  std::size_t b = skip_ws(s), e = s.size();
  while (e > b && is_ws(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// Longest suffix of s that is a proper prefix of marker (it may still become the marker).
std::size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  const std::size_t max = std::min(s.size(), marker.size() - 1);
  for (std::size_t n = max; n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// One whole JSON value (object or array), not too deep; nullopt otherwise.
std::optional<json> parse_value(std::string_view text) {
  text = trim(text);
  if (text.empty() || (text[0] != '{' && text[0] != '[')) return std::nullopt;
  bool too_deep = false;
  if (json_value_end(text, kMaxDepth, &too_deep) != text.size() || too_deep) return std::nullopt;
  return parse_bounded_json<json>(text);
}

// {"name": N, "arguments"|"parameters": {...} or a string holding an object}.
std::optional<ParsedToolCall> call_from(const json &obj) {
  if (!obj.is_object()) return std::nullopt;
  auto name = obj.find("name");
  if (name == obj.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  json args = json::object();
  auto a = obj.find("arguments");
  if (a == obj.end()) a = obj.find("parameters");
  if (a != obj.end()) {
    if (a->is_string()) {
      auto inner = parse_value(a->get<std::string>());
      if (!inner || !inner->is_object()) return std::nullopt;
      args = std::move(*inner);
    } else if (a->is_object()) {
      args = *a;
    } else if (!a->is_null()) {
      return std::nullopt;
    }
  }
  return ParsedToolCall{name->get<std::string>(), dump(args)};
}

enum class Head { kNeedMore, kNo, kYes };

// The head of a call object at s[0]: {"name": N, "arguments"|"parameters": { with N a
// non-empty string; *args_at is where the arguments' '{' is.
Head call_head(std::string_view s, std::string *name, std::size_t *args_at) {
  std::size_t i = 0;
  auto more = [&] {
    i = skip_ws(s, i);
    return i < s.size();
  };
  auto punct = [&](char c) {
    if (!more()) return Head::kNeedMore;
    if (s[i] != c) return Head::kNo;
    ++i;
    return Head::kYes;
  };
  auto literal = [&](std::string *out) {
    if (!more()) return Head::kNeedMore;
    if (s[i] != '"') return Head::kNo;
    std::size_t j = i + 1;
    for (bool esc = false; j < s.size(); ++j) {
      if (esc)
        esc = false;
      else if (s[j] == '\\')
        esc = true;
      else if (s[j] == '"')
        break;
    }
    if (j == s.size()) return Head::kNeedMore;
    const auto v = json::parse(s.substr(i, j + 1 - i), nullptr, false);
    if (!v.is_string()) return Head::kNo;
    *out = v.get<std::string>();
    i = j + 1;
    return Head::kYes;
  };
  std::string key;
  Head h;
  if ((h = punct('{')) != Head::kYes || (h = literal(&key)) != Head::kYes) return h;
  if (key != "name") return Head::kNo;
  if ((h = punct(':')) != Head::kYes || (h = literal(name)) != Head::kYes) return h;
  if (name->empty()) return Head::kNo;
  if ((h = punct(',')) != Head::kYes || (h = literal(&key)) != Head::kYes) return h;
  if (key != "arguments" && key != "parameters") return Head::kNo;
  if ((h = punct(':')) != Head::kYes || (h = punct('{')) != Head::kYes) return h;
  *args_at = i - 1;
  return Head::kYes;
}

}  // namespace

const char *tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kNone:
      return "none";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kHarmony:
      return "harmony";
  }
  return "?";
}

ToolCallFormat detect_tool_call_format(
    const std::function<std::size_t(std::string_view)> &token_count) {
  if (token_count("<|channel|>") == 1 && token_count("<|constrain|>") == 1)
    return ToolCallFormat::kHarmony;
  if (token_count(kHermesOpen) == 1) return ToolCallFormat::kHermes;
  if (token_count(kMistralMarker) == 1) return ToolCallFormat::kMistral;
  if (token_count(kPythonTag) == 1) return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kHermes;
}

namespace {

// Advances a scan over text[scan.pos...]; text starts at the value's first byte.
template <typename Scan>
void scan_json(Scan &scan, std::string_view text, int max_depth) {
  for (std::size_t i = scan.pos; i < text.size() && !scan.done; ++i) {
    const char c = text[i];
    scan.pos = i + 1;
    if (scan.in_string) {
      if (scan.escaped)
        scan.escaped = false;
      else if (c == '\\')
        scan.escaped = true;
      else if (c == '"')
        scan.in_string = false;
      continue;
    }
    if (c == '"') {
      scan.in_string = true;
    } else if (c == '{' || c == '[') {
      if (++scan.depth > max_depth) {
        scan.too_deep = true;
        scan.done = true;  // settled: it is not a call whatever follows
      }
    } else if (c == '}' || c == ']') {
      if (--scan.depth <= 0) scan.done = true;
    } else if (scan.depth == 0 && !is_ws(c)) {
      scan.done = true;  // not a bracketed value; settled (the parse will fail)
    }
  }
}

struct FreeScan {
  std::size_t pos = 0;
  int depth = 0;
  bool in_string = false, escaped = false, too_deep = false, done = false;
};

}  // namespace

std::size_t json_value_end(std::string_view text, int max_depth, bool *too_deep) {
  FreeScan scan;
  scan_json(scan, text, max_depth);
  if (too_deep) *too_deep = scan.too_deep;
  return scan.done ? scan.pos : std::string_view::npos;
}

std::size_t ToolCallParser::scan_value(std::size_t from, bool *too_deep) {
  if (scan_.origin != from) scan_ = JsonScan{from};
  scan_json(scan_, std::string_view(buf_).substr(from), kMaxDepth);
  *too_deep = scan_.too_deep;
  return scan_.done ? scan_.pos : std::string_view::npos;
}

void ToolCallParser::consume(std::size_t n) {
  buf_.erase(0, n);
  scan_ = JsonScan{};
  head_failed_ = false;
}

void ToolCallParser::stream_object(std::size_t at, bool need_known) {
  if (!stream_args_) return;
  if (!open_.started) {
    if (head_failed_) return;
    std::string name;
    std::size_t args = 0;
    Head h = call_head(std::string_view(buf_).substr(at), &name, &args);
    if (h == Head::kNeedMore && buf_.size() - at > kMaxHead) h = Head::kNo;
    if (h == Head::kYes && need_known && !known(name)) h = Head::kNo;
    if (h == Head::kNo) head_failed_ = true;
    if (h != Head::kYes) return;
    stream_start(std::move(name), at + args);
  }
  stream_feed();
}

void ToolCallParser::stream_start(std::string name, std::size_t args_at) {
  held_ws_.clear();
  after_call_ = false;
  ++calls_;
  ToolParseEvent ev;
  ev.kind = ToolParseEvent::Kind::kCallStart;
  ev.call.name = name;
  out_.push_back(std::move(ev));
  open_ = OpenCall{};
  open_.started = true;
  open_.name = std::move(name);
  open_.args_at = args_at;
}

void ToolCallParser::stream_feed() {
  if (!open_.started || open_.args.done() || open_.args_at + open_.fed >= buf_.size()) return;
  open_.fed += open_.args.feed(std::string_view(buf_).substr(open_.args_at + open_.fed));
  std::string frag = open_.args.take_new();
  if (frag.empty()) return;
  if (!out_.empty() && out_.back().kind == ToolParseEvent::Kind::kCallArgs) {
    out_.back().text += frag;
    return;
  }
  ToolParseEvent ev;
  ev.kind = ToolParseEvent::Kind::kCallArgs;
  ev.text = std::move(frag);
  out_.push_back(std::move(ev));
}

bool ToolCallParser::end_call(std::optional<ParsedToolCall> call) {
  if (open_.started) {
    stream_feed();
    ToolParseEvent ev;
    ev.kind = ToolParseEvent::Kind::kCallEnd;
    ev.complete = call.has_value() && open_.args.done();
    ev.call.name = std::move(open_.name);
    ev.call.arguments = open_.args.output();
    out_.push_back(std::move(ev));
    open_ = OpenCall{};
    held_ws_.clear();
    after_call_ = true;
    return true;
  }
  if (!call) return false;
  emit_call(std::move(*call));
  return true;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, std::vector<std::string> known_tools)
    : format_(format), known_(std::move(known_tools)) {
  if (format_ == ToolCallFormat::kNone) state_ = State::kPassthrough;
}

bool ToolCallParser::known(const std::string &name) const {
  return std::find(known_.begin(), known_.end(), name) != known_.end();
}

std::vector<ToolParseEvent> ToolCallParser::feed(std::string_view text) {
  buf_.append(text);
  run(false);
  return std::exchange(out_, {});
}

std::vector<ToolParseEvent> ToolCallParser::finish(bool cut_short) {
  cut_short_ = cut_short;
  run(true);
  if (!held_ws_.empty() && calls_ == 0) {
    ToolParseEvent e;
    e.text = std::exchange(held_ws_, {});
    out_.push_back(std::move(e));
  }
  held_ws_.clear();
  return std::exchange(out_, {});
}

void ToolCallParser::run(bool final) {
  while (step(final)) {
  }
}

void ToolCallParser::emit_text(std::string text) {
  std::string_view t = text;
  if (after_call_) {
    t.remove_prefix(skip_ws(t));
    if (t.empty()) return;
    after_call_ = false;
  }
  std::string full = held_ws_;
  full.append(t);
  std::size_t e = full.size();
  while (e > 0 && is_ws(full[e - 1])) --e;
  held_ws_ = full.substr(e);
  full.resize(e);
  if (full.empty()) return;
  if (!out_.empty() && out_.back().kind == ToolParseEvent::Kind::kText) {
    out_.back().text += full;
  } else {
    ToolParseEvent ev;
    ev.text = std::move(full);
    out_.push_back(std::move(ev));
  }
}

void ToolCallParser::emit_call(ParsedToolCall call) {
  held_ws_.clear();
  after_call_ = true;
  ++calls_;
  if (stream_args_) {  // a call not streamed: its three events at once
    ToolParseEvent start, args, end;
    start.kind = ToolParseEvent::Kind::kCallStart;
    start.call.name = call.name;
    args.kind = ToolParseEvent::Kind::kCallArgs;
    args.text = call.arguments;
    end.kind = ToolParseEvent::Kind::kCallEnd;
    end.call = std::move(call);
    out_.push_back(std::move(start));
    out_.push_back(std::move(args));
    out_.push_back(std::move(end));
    return;
  }
  ToolParseEvent ev;
  ev.kind = ToolParseEvent::Kind::kCall;
  ev.call = std::move(call);
  out_.push_back(std::move(ev));
}

bool ToolCallParser::step(bool final) {
  switch (state_) {
    case State::kPassthrough: {
      {
        emit_text(buf_);
        consume(buf_.size());
      }
      return false;
    }
    case State::kStart: {
      const std::string_view s = std::string_view(buf_).substr(skip_ws(buf_));
      if (format_ == ToolCallFormat::kHermes || format_ == ToolCallFormat::kHarmony) {
        state_ = State::kContent;
        return true;
      }
      const std::string_view marker =
          format_ == ToolCallFormat::kLlama3Json ? kPythonTag : kMistralMarker;
      if (s.empty() || (s.size() < marker.size() && marker.substr(0, s.size()) == s)) {
        if (!final) return false;  // may still become the marker or a call
        state_ = format_ == ToolCallFormat::kMistral ? State::kContent : State::kPassthrough;
        return true;
      }
      if (s.substr(0, marker.size()) == marker) {
        if (format_ == ToolCallFormat::kMistral) {
          state_ = State::kContent;  // the content scan finds the marker
        } else {
          marked_ = true;  // kBareJson skips the tag; it stays in buf_ in case it is content
          state_ = State::kBareJson;
        }
        return true;
      }
      const char want = format_ == ToolCallFormat::kLlama3Json ? '{' : '[';
      if (s[0] == want)
        state_ = State::kBareJson;
      else
        state_ = format_ == ToolCallFormat::kMistral ? State::kContent : State::kPassthrough;
      return true;
    }
    case State::kContent: {
      const std::string_view marker = format_ == ToolCallFormat::kHermes    ? kHermesOpen
                                      : format_ == ToolCallFormat::kHarmony ? kHarmonyOpen
                                                                            : kMistralMarker;
      const std::size_t p = buf_.find(marker);
      if (p != std::string::npos) {
        emit_text(buf_.substr(0, p));
        consume(p + marker.size());
        state_ = format_ == ToolCallFormat::kHermes    ? State::kHermesCall
                 : format_ == ToolCallFormat::kHarmony ? State::kHarmonyCall
                                                       : State::kMarkedJson;
        return true;
      }
      const std::size_t keep = final ? 0 : partial_marker_suffix(buf_, marker);
      emit_text(buf_.substr(0, buf_.size() - keep));
      consume(buf_.size() - keep);
      return false;
    }
    case State::kHermesCall: {
      // The call ends after its JSON object and the close tag; the object is scanned
      // first so that a close tag inside a JSON string does not end it.
      // `closed`: the close tag was read. An output cut short (max_tokens) before its
      // close tag is text: the call may be missing arguments.
      auto settle = [&](std::size_t body_end, std::size_t consumed, bool closed = false) {
        std::optional<ParsedToolCall> call;
        if (closed || !cut_short_)
          if (auto j = parse_value(std::string_view(buf_).substr(0, body_end)))
            call = call_from(*j);
        if (!end_call(std::move(call)))
          emit_text(std::string(kHermesOpen) + buf_.substr(0, consumed));
        consume(consumed);
        state_ = State::kContent;
        return true;
      };
      const std::size_t i = skip_ws(buf_);
      if (i < buf_.size() && buf_[i] == '{') {
        stream_object(i, false);
        bool deep = false;
        const std::size_t n = scan_value(i, &deep);
        if (n == std::string_view::npos) return final ? settle(buf_.size(), buf_.size()) : false;
        if (!deep) {
          const std::size_t k = skip_ws(buf_, i + n);
          const std::string_view after = std::string_view(buf_).substr(k);
          if (after.substr(0, kHermesClose.size()) == kHermesClose)
            return settle(i + n, k + kHermesClose.size(), true);
          // The model stopped right after the JSON: a whole call without its close tag.
          if (after.empty() && final) return settle(i + n, buf_.size());
          if (after.size() < kHermesClose.size() && kHermesClose.substr(0, after.size()) == after)
            return final ? settle(buf_.size(), buf_.size()) : false;
        }
      } else if (i == buf_.size() && !final) {
        return false;
      }
      // Not a JSON object followed by the close tag: content up to the close tag.
      const std::size_t p = buf_.find(kHermesClose);
      if (p == std::string::npos) return final ? settle(buf_.size(), buf_.size()) : false;
      return settle(p, p + kHermesClose.size(), true);
    }
    case State::kHarmonyCall:
      return harmony_call_step(final);
    case State::kMarkedJson: {  // Mistral, after [TOOL_CALLS]
      const std::size_t i = skip_ws(buf_);
      auto give_up = [&](std::size_t upto) {
        if (!end_call(std::nullopt)) emit_text(std::string(kMistralMarker) + buf_.substr(0, upto));
        consume(upto);
        state_ = State::kContent;
        return true;
      };
      if (i == buf_.size()) return final ? give_up(buf_.size()) : false;
      const std::string_view s = std::string_view(buf_).substr(i);
      if (s[0] == '[') {
        bool deep = false;
        const std::size_t end = scan_value(i, &deep);
        if (end == std::string_view::npos) return final ? give_up(buf_.size()) : false;
        std::vector<ParsedToolCall> calls;
        bool ok = !deep;
        if (ok) {
          auto j = parse_value(s.substr(0, end));
          ok = j && j->is_array() && !j->empty();
          if (ok)
            for (const auto &c : *j) {
              auto call = call_from(c);
              if (!call) {
                ok = false;
                break;
              }
              calls.push_back(std::move(*call));
            }
        }
        if (!ok) return give_up(i + end);
        for (auto &c : calls) emit_call(std::move(c));
        consume(i + end);
        state_ = State::kContent;
        return true;
      }
      // Tekken v11: NAME[ARGS]{...} (the [ARGS] token may have been dropped).
      std::size_t k = 0;
      while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '_' ||
                              s[k] == '-' || s[k] == '.'))
        ++k;
      if (k == 0) return give_up(i);
      std::size_t a = k;
      const std::string_view rest = s.substr(k);
      if (rest.substr(0, kMistralArgs.size()) == kMistralArgs)
        a += kMistralArgs.size();
      else if (rest.empty() ||
               (rest.size() < kMistralArgs.size() && kMistralArgs.substr(0, rest.size()) == rest))
        return final ? give_up(buf_.size()) : false;
      if (a == s.size()) return final ? give_up(buf_.size()) : false;
      if (s[a] != '{') return give_up(i + a);
      if (stream_args_ && !open_.started) stream_start(std::string(s.substr(0, k)), i + a);
      stream_feed();
      bool deep = false;
      const std::size_t end = scan_value(i + a, &deep);
      if (end == std::string_view::npos) return final ? give_up(buf_.size()) : false;
      auto j = deep ? std::nullopt : parse_value(s.substr(a, end));
      if (!j || !j->is_object()) return give_up(i + a + end);
      end_call(ParsedToolCall{std::string(s.substr(0, k)), dump(*j)});
      consume(i + a + end);
      state_ = State::kContent;
      return true;
    }
    case State::kBareJson: {  // Llama objects or a Mistral array, at the start of the output
      std::size_t i = skip_ws(buf_);
      const int settled = calls_ - (open_.started ? 1 : 0);  // an open call is still at buf_
      if (marked_ && settled == 0 &&
          std::string_view(buf_).substr(i, kPythonTag.size()) == kPythonTag)
        i = skip_ws(buf_, i + kPythonTag.size());
      if (settled > 0)
        while (i < buf_.size() && (buf_[i] == ';' || is_ws(buf_[i]))) ++i;
      if (i == buf_.size()) {
        if (final) {
          emit_text(buf_);
          consume(buf_.size());
        }
        return false;
      }
      const std::string_view s = std::string_view(buf_).substr(i);
      const char want = format_ == ToolCallFormat::kLlama3Json ? '{' : '[';
      if (s[0] != want) {
        state_ = State::kPassthrough;
        return true;
      }
      if (want == '{') stream_object(i, !marked_);
      bool deep = false;
      const std::size_t end = scan_value(i, &deep);
      if (end == std::string_view::npos) {
        if (!final) return false;
        if (end_call(std::nullopt)) {  // a streamed call cut off: its text is dropped
          consume(buf_.size());
          return false;
        }
        state_ = State::kPassthrough;
        return true;
      }
      std::vector<ParsedToolCall> calls;
      auto j = deep ? std::nullopt : parse_value(s.substr(0, end));
      bool ok = j.has_value();
      if (ok && j->is_object()) {
        auto c = call_from(*j);
        ok = c && (marked_ || known(c->name));
        if (ok) calls.push_back(std::move(*c));
      } else if (ok && j->is_array() && !j->empty()) {
        for (const auto &e : *j) {
          auto c = call_from(e);
          if (!c || !known(c->name)) {
            ok = false;
            break;
          }
          calls.push_back(std::move(*c));
        }
      } else {
        ok = false;
      }
      if (!ok) {
        if (end_call(std::nullopt)) {
          consume(i + end);
          return true;
        }
        state_ = State::kPassthrough;
        return true;
      }
      if (open_.started)
        end_call(std::move(calls[0]));  // a streamed call is one object
      else
        for (auto &c : calls) emit_call(std::move(c));
      consume(i + end);
      if (format_ == ToolCallFormat::kMistral) state_ = State::kContent;
      return true;
    }
  }
  return false;
}

ToolParseResult parse_tool_calls(std::string_view text, ToolCallFormat format,
                                 const std::vector<std::string> &known_tools, bool cut_short) {
  ToolCallParser p(format, known_tools);
  auto events = p.feed(text);
  auto rest = p.finish(cut_short);
  events.insert(events.end(), std::make_move_iterator(rest.begin()),
                std::make_move_iterator(rest.end()));
  ToolParseResult r;
  for (auto &e : events) {
    if (e.kind == ToolParseEvent::Kind::kText)
      r.content += e.text;
    else
      r.calls.push_back(std::move(e.call));
  }
  return r;
}

// After kHarmonyOpen: NAME, anything up to <|message|>, a JSON object, <|call|> (or the
// end of the output). Anything else is content, marker included.
bool ToolCallParser::harmony_call_step(bool final) {
  auto settle = [&](std::optional<ParsedToolCall> call, std::size_t consumed) {
    if (!end_call(std::move(call))) emit_text(std::string(kHarmonyOpen) + buf_.substr(0, consumed));
    consume(consumed);
    state_ = State::kContent;
    return true;
  };
  const std::size_t m = buf_.find(kHarmonyMessage);
  if (m == std::string::npos) return final ? settle(std::nullopt, buf_.size()) : false;
  std::size_t name_end = 0;
  while (name_end < m && !is_ws(buf_[name_end]) && buf_[name_end] != '<') ++name_end;
  const std::size_t i = skip_ws(buf_, m + kHarmonyMessage.size());
  if (i == buf_.size()) return final ? settle(std::nullopt, buf_.size()) : false;
  if (name_end == 0 || buf_[i] != '{') return settle(std::nullopt, i);
  if (stream_args_ && !open_.started) stream_start(buf_.substr(0, name_end), i);
  stream_feed();
  bool deep = false;
  const std::size_t n = scan_value(i, &deep);
  if (n == std::string_view::npos) return final ? settle(std::nullopt, buf_.size()) : false;
  const std::size_t k = skip_ws(buf_, i + n);
  const std::string_view after = std::string_view(buf_).substr(k);
  std::size_t consumed;
  if (after.substr(0, kHarmonyCall.size()) == kHarmonyCall)
    consumed = k + kHarmonyCall.size();
  else if (after.empty() && final && !cut_short_)  // the output ended at the call's end token
    consumed = k;
  else if (after.empty() || (after.size() < kHarmonyCall.size() && kHarmonyCall.starts_with(after)))
    return final ? settle(std::nullopt, buf_.size()) : false;
  else
    consumed = k;
  std::optional<ParsedToolCall> call;
  if (!deep)
    if (auto j = parse_value(std::string_view(buf_).substr(i, n)); j && j->is_object())
      call = ParsedToolCall{buf_.substr(0, name_end), dump(*j)};
  return settle(std::move(call), consumed);
}

}  // namespace keel
