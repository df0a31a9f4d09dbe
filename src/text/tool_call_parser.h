// Tool calls in generated text: finds the calls a model wrote in its own format and
// splits the output into content and calls, all at once or incrementally (for
// streaming) with the same result for any chunking of the text.
//
// Formats:
//   kHermes      Hermes 2/3, Qwen2.5, Qwen3: <tool_call>{"name": N, "arguments": {...}}</tool_call>
//                anywhere in the text; text around the calls is content.
//   kLlama3Json  Llama 3.1/3.2/3.3: the whole output is one or more JSON objects
//                {"name": N, "parameters": {...}} (or "arguments"), separated by ';'
//                or whitespace, optionally after <|python_tag|>.
//   kMistral     Mistral: [TOOL_CALLS] followed by a JSON array of {"name", "arguments"}
//                objects (or, tekken v11, NAME[ARGS]{...}); an output that starts with
//                such an array is taken as calls too (the detokenizer drops the special
//                [TOOL_CALLS] token).
//   kHarmony     gpt-oss: <|channel|>commentary to=functions.N
//   <|constrain|>json<|message|>{...}<|call|>
//                as the harmony reasoning split writes calls back (text/harmony_parser.h).
// Where no marker shows a call (bare JSON in the Llama and bare-array Mistral forms),
// the call must name a tool the request declared, so JSON answers stay content.
// Malformed call text is content, never an error. Whitespace between content and
// calls is dropped (as vLLM does), so content is not padded with newlines.
//
// Streamed arguments (set_stream_arguments): instead of one kCall per call, a call
// comes out as kCallStart (its name) as soon as the name and the opening brace of its
// arguments are read, kCallArgs fragments of the arguments' canonical form
// (text/json_args_stream.h) as the model writes them, and kCallEnd; the fragments
// concatenate to kCallEnd's arguments. Where the name is not known before the
// arguments (keys in another order, arguments as a JSON string, Mistral's list form
// [TOOL_CALLS][{...}, ...]), the three come together once the call is whole. A call
// that was started cannot be taken back: if it then turns out malformed or is cut
// short, kCallEnd has complete = false, its arguments are what was streamed (they may
// not parse), and the rest of its markup is dropped (not content).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/json_args_stream.h"

namespace keel {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral, kHarmony };

const char *tool_call_format_name(ToolCallFormat f);

// Picks the format from the vocabulary: a marker that is one token of the vocabulary
// says which format the model was trained on (harmony's <|channel|> and <|constrain|>
// before the others: o200k_harmony also has no <tool_call> token). token_count(text) is how many
// tokens `text` encodes to (without BOS). Falls back to kHermes, whose explicit markup makes a
// false positive unlikely.
ToolCallFormat detect_tool_call_format(
    const std::function<std::size_t(std::string_view)> &token_count);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object, compact, keys in the model's order
};

struct ToolParseEvent {
  enum class Kind { kText, kCall, kCallStart, kCallArgs, kCallEnd };
  Kind kind = Kind::kText;
  std::string text;      // kText; kCallArgs: the next fragment of the arguments
  ParsedToolCall call;   // kCall, kCallEnd; kCallStart: the name only
  bool complete = true;  // kCallEnd: false when the call was malformed or cut short
};

class ToolCallParser {
 public:
  // known_tools: the names the request declared (checked only for unmarked calls).
  ToolCallParser(ToolCallFormat format, std::vector<std::string> known_tools);

  // Calls come out as kCallStart, kCallArgs..., kCallEnd (see the top of this file).
  void set_stream_arguments(bool on) { stream_args_ = on; }

  // Feeds more generated text; returns what is now settled, in order. Text that may
  // still turn out to be (part of) a call is held back.
  std::vector<ToolParseEvent> feed(std::string_view text);
  // The end of the output: everything held back is settled. `cut_short`: the output
  // ran out of tokens (finish "length"), so a call whose end markup never came (Hermes
  // </tool_call>, harmony <|call|>) is text, not a call with possibly missing arguments.
  std::vector<ToolParseEvent> finish(bool cut_short = false);

  int calls() const { return calls_; }

 private:
  enum class State {
    kStart,
    kContent,
    kHermesCall,
    kHarmonyCall,
    kMarkedJson,
    kBareJson,
    kPassthrough
  };
  bool harmony_call_step(bool final);

  // A resumable scan for the end of the JSON value at buf_[origin]: the buffer only
  // grows while a call is incomplete, so each feed scans only the new bytes.
  struct JsonScan {
    std::size_t origin = std::string::npos;
    std::size_t pos = 0;  // bytes scanned, from origin
    int depth = 0;
    bool in_string = false, escaped = false, too_deep = false, done = false;
  };

  // Where the JSON value at buf_[from] ends (relative to from), or npos while incomplete.
  std::size_t scan_value(std::size_t from, bool *too_deep);
  void consume(std::size_t n);  // drops n bytes from the front of buf_
  void run(bool final);
  bool step(bool final);  // one state transition; false when it needs more text
  void emit_text(std::string text);
  void emit_call(ParsedToolCall call);
  bool known(const std::string &name) const;

  // The call being streamed: its arguments begin at buf_[args_at] (buf_ is not
  // consumed while a call is open).
  struct OpenCall {
    bool started = false;
    std::string name;
    std::size_t args_at = 0, fed = 0;
    JsonArgsStream args;
  };
  // Starts streaming the call object at buf_[at] once its head {"name": N,
  // "arguments"|"parameters": { is read (need_known: N must be a declared tool).
  void stream_object(std::size_t at, bool need_known);
  void stream_start(std::string name, std::size_t args_at);
  void stream_feed();  // passes the open call's new argument bytes on
  // Settles a call: the open one ends (complete when `call` parsed), else `call` is
  // emitted whole. Returns false when there was neither (the caller emits text).
  bool end_call(std::optional<ParsedToolCall> call);

  ToolCallFormat format_;
  std::vector<std::string> known_;
  State state_ = State::kStart;
  std::string buf_;  // unsettled text
  JsonScan scan_;
  std::string held_ws_;  // trailing whitespace of emitted content (dropped before a call)
  bool after_call_ = false;
  bool marked_ = false;     // <|python_tag|> seen: any tool name counts
  bool cut_short_ = false;  // set by finish(true)
  int calls_ = 0;
  bool stream_args_ = false;
  OpenCall open_;
  bool head_failed_ = false;  // the call object at hand has no streamable head
  std::vector<ToolParseEvent> out_;
};

struct ToolParseResult {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

// The whole output at once (same result as feeding it in any chunks).
ToolParseResult parse_tool_calls(std::string_view text, ToolCallFormat format,
                                 const std::vector<std::string> &known_tools,
                                 bool cut_short = false);

// Where the JSON value that starts at text[0] ('{' or '[') ends (one past its closing
// bracket), or npos while it is incomplete. Sets *too_deep when nesting exceeds
// max_depth (the caller then treats it as not a call). Strings and escapes are honoured.
std::size_t json_value_end(std::string_view text, int max_depth, bool *too_deep);

}  // namespace keel
