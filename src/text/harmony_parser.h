// gpt-oss's harmony output format, split as it streams: the model writes messages
//   <|channel|>analysis<|message|>...<|end|>
//   <|start|>assistant<|channel|>final<|message|>...<|return|>
//   <|start|>assistant<|channel|>commentary to=functions.NAME
//   <|constrain|>json<|message|>{...}<|call|>
// (the first header follows the prompt's "<|start|>assistant"; the recipient may also
// stand after the role: "<|start|>assistant to=functions.NAME<|channel|>commentary json").
// The analysis channel is reasoning; final, and commentary without a recipient (a
// preamble the user sees), are content; a message to functions.NAME is a tool call
// whose arguments are the JSON body. Text with no harmony header (a model that ignores
// the format) is content, as is a call whose body is not a JSON object and a message to
// a built-in tool keel does not run (browser.*, python). The same result for any
// chunking of the text.
//
// With stream_calls on, a call whose body starts with '{' is not held until its end:
// its markup and body come out as kCallText pieces as they arrive (the harmony form
// harmony_call_text writes, <|call|> once the message ends), so that the kHarmony
// tool-call parser can stream its arguments; that parser then decides whether it is a
// call. A body that does not start with '{' is handled as without the option.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "text/tool_call_parser.h"

namespace keel {

struct HarmonyEvent {
  enum class Kind { kReasoning, kContent, kCall, kCallText };
  Kind kind = Kind::kContent;
  std::string text;     // kReasoning, kContent, kCallText
  ParsedToolCall call;  // kCall
};

class HarmonyParser {
 public:
  // Feeds more generated text; returns what is now settled, in order. A possible
  // marker prefix at the end is held back, and a call comes out whole at its end.
  std::vector<HarmonyEvent> feed(std::string_view text);
  // The end of the output: a message cut off is settled as it stands.
  std::vector<HarmonyEvent> finish();
  // See the top of this file. Set before the first feed.
  void set_stream_calls(bool on) { stream_calls_ = on; }

 private:
  enum class State { kHeader, kBody };
  enum class Kind { kReasoning, kContent, kCall };
  bool step(bool final);
  bool header_step(bool final);
  bool body_step(bool final);
  void begin_body(std::string_view header);
  void end_body(bool marker);
  void call_body(std::string_view text);
  void emit(HarmonyEvent::Kind kind, std::string_view text);

  State state_ = State::kHeader;
  bool after_start_ = true;  // the header follows <|start|> (the prompt's, at first)
  bool first_header_ = true;
  Kind kind_ = Kind::kContent;
  std::string name_;  // kCall: the function
  std::string body_;  // kCall: the arguments so far
  bool stream_calls_ = false;
  bool call_streaming_ = false;     // kCall: its body is coming out as kCallText
  bool began_[2] = {false, false};  // some reasoning / content emitted (separators)
  bool message_open_ = false;       // emitted text in the current message
  std::string buf_;
  std::vector<HarmonyEvent> out_;
};

// A call in the one form the kHarmony tool-call parser reads:
// <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>
std::string harmony_call_text(const ParsedToolCall &call);

}  // namespace keel
