// Anthropic Messages API responses: the message object and the streamed event sequence
// message_start, content blocks (text, tool_use), message_delta, message_stop.
#include <cstdio>

#include "core/bounded_json.h"
#include "server/anthropic/anthropic_types.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"

namespace keel::server::anthropic {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char *stop_reason(FinishReason finish, const std::string &stop_sequence, int calls) {
  if (!stop_sequence.empty()) return "stop_sequence";
  if (finish == FinishReason::kLength) return "max_tokens";
  if (calls > 0) return "tool_use";
  return "end_turn";
}

json input_of(const ParsedToolCall &c) {
  auto j = parse_bounded_json<json>(c.arguments);
  return j && j->is_object() ? std::move(*j) : json::object();
}

// Anthropic splits the prompt three ways: read from the cache, written to it, and the
// rest (input_tokens); the three add up to the prompt.
json usage(int input_tokens, int output_tokens, int cached, int stored) {
  return {{"input_tokens", input_tokens - cached - stored},
          {"output_tokens", output_tokens},
          {"cache_creation_input_tokens", stored},
          {"cache_read_input_tokens", cached}};
}

std::string block_start(int index, const json &block) {
  return sse_event("content_block_start",
                   {{"type", "content_block_start"}, {"index", index}, {"content_block", block}});
}

std::string block_stop(int index) {
  return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
}

std::string text_delta(int index, const std::string &text) {
  return sse_event("content_block_delta", {{"type", "content_block_delta"},
                                           {"index", index},
                                           {"delta", {{"type", "text_delta"}, {"text", text}}}});
}

RenderContext::Stream &stream_state(const RenderContext &ctx) {
  auto &s = ctx.stream;
  if (!s.started) {
    s.reasoning = ReasoningParser::for_format(ctx.output_format, ctx.opens_reasoning);
    s.parser = ToolCallParser(ctx.tool_format, ctx.tool_names);
    s.parser.set_stream_arguments(true);
    s.reasoning.set_stream_calls(true);
    s.started = true;
  }
  return s;
}

std::string close_thinking(RenderContext::Stream &s) {
  if (!s.thinking_open) return {};
  s.thinking_open = false;
  const int index = s.next_block++;
  return sse_event(
             "content_block_delta",
             {{"type", "content_block_delta"},
              {"index", index},
              {"delta",
               {{"type", "signature_delta"}, {"signature", thinking_signature(s.thinking)}}}}) +
         block_stop(index);
}

std::string thinking_events(const RenderContext &ctx, RenderContext::Stream &s,
                            const std::string &text) {
  if (text.empty()) return {};
  std::string out;
  if (!s.thinking_open) {
    out += block_start(s.next_block, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    s.thinking_open = true;
  }
  s.thinking += text;
  if (!ctx.thinking_omitted)
    out += sse_event("content_block_delta",
                     {{"type", "content_block_delta"},
                      {"index", s.next_block},
                      {"delta", {{"type", "thinking_delta"}, {"thinking", text}}}});
  return out;
}

std::string input_json_delta(int index, const std::string &partial) {
  return sse_event("content_block_delta",
                   {{"type", "content_block_delta"},
                    {"index", index},
                    {"delta", {{"type", "input_json_delta"}, {"partial_json", partial}}}});
}

// The events of parsed output as content blocks: text goes into an open text block
// (opened on demand); a call is a tool_use block whose input streams as
// input_json_delta fragments while the model writes its arguments.
std::string stream_events(const RenderContext &ctx, RenderContext::Stream &s,
                          const std::vector<ToolParseEvent> &events) {
  std::string out;
  for (const auto &e : events) {
    switch (e.kind) {
      case ToolParseEvent::Kind::kText:
        if (e.text.empty()) break;
        if (!s.text_open) {
          out += block_start(s.next_block, {{"type", "text"}, {"text", ""}});
          s.text_open = true;
        }
        out += text_delta(s.next_block, e.text);
        break;
      case ToolParseEvent::Kind::kCallStart:
        if (s.text_open) {
          out += block_stop(s.next_block++);
          s.text_open = false;
        }
        s.tool_block = s.next_block++;
        out += block_start(s.tool_block, {{"type", "tool_use"},
                                          {"id", tool_use_id(ctx, s.calls++)},
                                          {"name", e.call.name},
                                          {"input", json::object()}});
        break;
      case ToolParseEvent::Kind::kCallArgs:
        if (s.tool_block >= 0) out += input_json_delta(s.tool_block, e.text);
        break;
      case ToolParseEvent::Kind::kCallEnd:
        // A call cut short (or malformed after it started) ends here too, with the
        // input streamed so far; stop_reason says max_tokens when it was cut.
        if (s.tool_block >= 0) out += block_stop(s.tool_block);
        s.tool_block = -1;
        break;
      case ToolParseEvent::Kind::kCall:  // not with streamed arguments
        break;
    }
  }
  return out;
}

// Answer text after the thinking: through the tool-call parser when tools are prepared.
std::string content_events(const RenderContext &ctx, RenderContext::Stream &s,
                           const std::string &text, bool final, bool cut_short = false) {
  std::string out;
  if (!text.empty()) out += close_thinking(s);
  if (ctx.tool_format == ToolCallFormat::kNone) {
    ToolParseEvent e;
    e.text = text;
    out += stream_events(ctx, s, {e});
  } else {
    out += stream_events(ctx, s, s.parser.feed(text));
    if (final) out += stream_events(ctx, s, s.parser.finish(cut_short));
  }
  return out;
}

std::string message_end(const ChoiceDelta &d, int output_tokens, int calls) {
  const FinishReason finish = d.finish.value_or(FinishReason::kStop);
  return sse_event("message_delta",
                   {{"type", "message_delta"},
                    {"delta",
                     {{"stop_reason", stop_reason(finish, d.stop_sequence, calls)},
                      {"stop_sequence",
                       d.stop_sequence.empty() ? json(nullptr) : json(d.stop_sequence)}}},
                    {"usage", {{"output_tokens", output_tokens}}}}) +
         sse_event("message_stop", {{"type", "message_stop"}});
}

}  // namespace

void prepare_tools(RenderContext &ctx, const MessagesRequest &req, const ModelText &text) {
  ctx.output_format = tool_call_format_of(text);
  if (req.tool_names.empty() || req.tool_choice == "none") return;
  ctx.tool_names = req.tool_names;
  ctx.tool_format = ctx.output_format;
}

std::string thinking_signature(const std::string &thinking) {
  // FNV-1a, 64 bits: stable across runs and builds (std::hash is not).
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : thinking) h = (h ^ c) * 1099511628211ULL;
  char buf[32];
  std::snprintf(buf, sizeof buf, "keel-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string tool_use_id(const RenderContext &ctx, int k) {
  const auto u = ctx.id.find('_');
  return "toolu_" + (u == std::string::npos ? ctx.id : ctx.id.substr(u + 1)) + "t" +
         std::to_string(k);
}

std::string render_message(const RenderContext &ctx, const Generation &g) {
  const auto &r = g.results().at(0);
  const int cached = g.cached_tokens();
  auto reasoning = ReasoningParser::for_format(ctx.output_format, ctx.opens_reasoning);
  ReasoningSplit split = reasoning.feed(r.text);
  const ReasoningSplit rest = reasoning.finish();
  split.reasoning += rest.reasoning;
  split.content += rest.content;
  json content = json::array();
  if (!split.reasoning.empty())
    content.push_back({{"type", "thinking"},
                       {"thinking", ctx.thinking_omitted ? std::string() : split.reasoning},
                       {"signature", thinking_signature(split.reasoning)}});
  int calls = 0;
  if (ctx.tool_format != ToolCallFormat::kNone) {
    auto parsed = parse_tool_calls(split.content, ctx.tool_format, ctx.tool_names,
                                   r.finish == FinishReason::kLength);
    calls = static_cast<int>(parsed.calls.size());
    if (!parsed.content.empty() || (calls == 0 && content.empty()))
      content.push_back({{"type", "text"}, {"text", parsed.content}});
    for (int k = 0; k < calls; ++k)
      content.push_back({{"type", "tool_use"},
                         {"id", tool_use_id(ctx, k)},
                         {"name", parsed.calls[k].name},
                         {"input", input_of(parsed.calls[k])}});
  } else if (!split.content.empty() || content.empty()) {
    content.push_back({{"type", "text"}, {"text", split.content}});
  }
  const int stored = g.stored_tokens();
  return dump({{"id", ctx.id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", ctx.model},
               {"content", content},
               {"stop_reason", stop_reason(r.finish, r.stop_sequence, calls)},
               {"stop_sequence", r.stop_sequence.empty() ? json(nullptr) : json(r.stop_sequence)},
               {"usage", usage(g.prompt_tokens(), g.completion_tokens(), cached, stored)}});
}

std::string sse_event(const std::string &name, const json &data) {
  return "event: " + name + "\ndata: " + dump(data) + "\n\n";
}

std::string stream_start(const RenderContext &ctx, int input_tokens, int cached_tokens,
                         int stored_tokens) {
  json msg{{"id", ctx.id},
           {"type", "message"},
           {"role", "assistant"},
           {"model", ctx.model},
           {"content", json::array()},
           {"stop_reason", nullptr},
           {"stop_sequence", nullptr},
           {"usage", usage(input_tokens, 0, cached_tokens, stored_tokens)}};
  return sse_event("message_start", {{"type", "message_start"}, {"message", msg}}) +
         sse_event("ping", {{"type", "ping"}});
}

std::string stream_delta(const RenderContext &ctx, const std::string &text) {
  auto &s = stream_state(ctx);
  const ReasoningSplit split = s.reasoning.feed(text);
  return thinking_events(ctx, s, split.reasoning) + content_events(ctx, s, split.content, false);
}

std::string stream_finish(const RenderContext &ctx, const ChoiceDelta &d, int output_tokens) {
  auto &s = stream_state(ctx);
  const ReasoningSplit split = s.reasoning.finish();
  std::string out = thinking_events(ctx, s, split.reasoning);
  out += content_events(ctx, s, split.content, true, d.finish == FinishReason::kLength);
  out += close_thinking(s);
  if (s.text_open) {
    out += block_stop(s.next_block++);
    s.text_open = false;
  } else if (s.next_block == 0) {
    // No content at all: one empty text block, as the non-streamed message has.
    out += block_start(0, {{"type", "text"}, {"text", ""}}) + block_stop(0);
    s.next_block = 1;
  }
  return out + message_end(d, output_tokens, s.calls);
}

std::string stream_error(int status, const std::string &message) {
  return sse_event("error",
                   {{"type", "error"},
                    {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}});
}

}  // namespace keel::server::anthropic
