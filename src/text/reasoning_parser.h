// Reasoning in generated text: splits a model's thinking block (<think>...</think>, as
// Qwen3, DeepSeek-R1 and GLM write it) from its answer, all at once or incrementally
// (for streaming) with the same result for any chunking of the text.
//
// Only a block at the start of the output counts (after leading whitespace), or the
// whole output up to the close marker when the prompt already opened the block (the
// R1 and Qwen3-thinking templates end their generation prompt with "<think>\n"). A
// block that never closes is all reasoning (the model was cut off while thinking).
// Whitespace around the markers is dropped, so neither part is padded with newlines.
//
// For gpt-oss's harmony format (ToolCallFormat::kHarmony) the split is by channel
// instead (text/harmony_parser.h): analysis messages are the reasoning, everything else
// the content, with each tool call written back into the content in one canonical
// harmony form (harmony_call_text) for the kHarmony tool-call parser to read.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "text/harmony_parser.h"
#include "text/tool_call_parser.h"

namespace keel {

struct ReasoningMarkers {
  std::string open = "<think>";
  std::string close = "</think>";
};

// What one feed settled: reasoning text and answer text, in that order.
struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // starts_inside: the prompt ends inside an open block (see prompt_opens_reasoning).
  explicit ReasoningParser(bool starts_inside = false, ReasoningMarkers markers = {});
  // The parser for a model's output format: harmony channels for kHarmony, else <think>.
  static ReasoningParser for_format(ToolCallFormat format, bool starts_inside);

  // Feeds more generated text; returns what is now settled. Text that may still turn
  // out to be (part of) a marker, and whitespace that may precede one, is held back.
  ReasoningSplit feed(std::string_view text);
  // The end of the output: everything held back is settled.
  ReasoningSplit finish();

  // Harmony: a call's text comes out as it is generated instead of whole at its end
  // (HarmonyParser::set_stream_calls), for a stream that passes its arguments on. Set
  // before the first feed; no effect on other formats.
  void set_stream_calls(bool on) {
    if (harmony_) harmony_->set_stream_calls(on);
  }

  // True while the output is inside the thinking block.
  bool in_reasoning() const { return state_ == State::kReasoning; }
  // True once the block has closed (the answer has begun).
  bool closed() const { return closed_; }

 private:
  enum class State { kStart, kReasoning, kAfterClose, kContent };
  void run(bool final, ReasoningSplit &out);
  // Appends reasoning text, without the whitespace that opens the block.
  void emit_reasoning(std::string_view text, ReasoningSplit &out);

  ReasoningMarkers markers_;
  State state_;
  bool closed_ = false;
  bool reasoning_begun_ = false;  // some reasoning text has been emitted
  std::string buf_;               // held back: a possible marker prefix or trailing whitespace
  std::optional<HarmonyParser> harmony_;  // set: the harmony format
  ReasoningSplit from_harmony(std::vector<HarmonyEvent> events);
};

// Whether a rendered prompt ends inside an open thinking block: its last open marker
// comes after its last close marker (ignoring trailing whitespace).
bool prompt_opens_reasoning(std::string_view prompt, const ReasoningMarkers &markers = {});

}  // namespace keel
