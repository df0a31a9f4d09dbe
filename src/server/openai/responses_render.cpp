// /v1/responses output: the response object, its output items and the stream events
// announcing them, built from generated text as it arrives (ResponseBuilder).
#include <algorithm>
#include <utility>

#include "server/openai/responses_types.h"

namespace keel::server::openai {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json or_null(const std::optional<std::string> &s) { return s ? json(*s) : json(nullptr); }

json text_part(const std::string &type, const std::string &text) {
  json p{{"type", type}, {"text", text}};
  if (type == "output_text") {
    p["annotations"] = json::array();
    p["logprobs"] = json::array();
  }
  return p;
}

}  // namespace

std::string response_sse(const json &event) {
  return "event: " + event.value("type", std::string("message")) + "\ndata: " + dump(event) +
         "\n\n";
}

ResponseBuilder::ResponseBuilder(const ResponseContext &ctx, const ResponsesRequest &req)
    : ctx_(ctx),
      req_(req),
      summary_(req.reasoning_summary.value_or("auto") != "none"),
      reasoning_(ctx.prompt_opens_reasoning) {
  RenderContext rc;
  rc.text = ctx.text;
  const ToolCallFormat format = tool_call_format(rc);
  reasoning_ = ReasoningParser::for_format(format, ctx.prompt_opens_reasoning);
  if (req.chat.parses_tool_calls()) tools_.emplace(format, req.chat.tool_names);
}

json ResponseBuilder::base(const char *status) const {
  const auto &s = req_.chat.sampling;
  return {
      {"id", ctx_.id},
      {"object", "response"},
      {"created_at", ctx_.created_at},
      {"status", status},
      {"background", req_.background},
      {"error", nullptr},
      {"incomplete_details", nullptr},
      {"instructions", req_.instructions},
      {"max_output_tokens", req_.max_output_tokens ? json(*req_.max_output_tokens) : json(nullptr)},
      {"max_tool_calls", nullptr},
      {"model", ctx_.model},
      {"output", json::array()},
      {"parallel_tool_calls", req_.parallel_tool_calls},
      {"previous_response_id", or_null(req_.previous_response_id)},
      {"prompt_cache_key", or_null(req_.prompt_cache_key)},
      {"reasoning",
       {{"effort", or_null(req_.reasoning_effort)}, {"summary", or_null(req_.reasoning_summary)}}},
      {"service_tier", "default"},
      {"store", req_.store},
      {"temperature", s.temperature},
      {"text", req_.text},
      {"tool_choice", req_.tool_choice},
      {"tools", req_.tools},
      {"top_logprobs", 0},
      {"top_p", s.top_p},
      {"truncation", "disabled"},
      {"usage", nullptr},
      {"user", or_null(req_.user)},
      {"metadata", req_.metadata}};
}

json ResponseBuilder::initial() const { return base("in_progress"); }

std::string ResponseBuilder::event(const char *type, json fields) {
  json e{{"type", type}};
  for (auto &[k, v] : fields.items()) e[k] = std::move(v);
  e["sequence_number"] = sequence_++;
  return streaming_ ? response_sse(e) : std::string();
}

std::string ResponseBuilder::item_id(const char *prefix) {
  // "resp_XYZ" -> "msg_XYZ_0": unique per response, stable across GETs.
  return std::string(prefix) + ctx_.id.substr(ctx_.id.find('_') + 1) + "_" +
         std::to_string(output_.size());
}

std::string ResponseBuilder::start_events() {
  std::string out = event("response.created", {{"response", initial()}});
  out += event("response.in_progress", {{"response", initial()}});
  return out;
}

// Reasoning is one part of the reasoning item: summary[0] (summary events) or, with
// summary "none", content[0] (reasoning_text events).
void ResponseBuilder::on_reasoning(const std::string &text, std::string &out) {
  const char *parts = summary_ ? "summary" : "content";
  const char *index_key = summary_ ? "summary_index" : "content_index";
  if (open_reasoning_ < 0) {
    close_message(out);
    open_reasoning_ = static_cast<int>(output_.size());
    json item{{"id", item_id("rs_")}, {"type", "reasoning"}, {"summary", json::array()}};
    if (!summary_) item["content"] = json::array();
    output_.push_back(item);
    out += event("response.output_item.added", {{"output_index", open_reasoning_}, {"item", item}});
    const json part = text_part(summary_ ? "summary_text" : "reasoning_text", "");
    out += event(summary_ ? "response.reasoning_summary_part.added" : "response.content_part.added",
                 {{"item_id", item["id"]},
                  {"output_index", open_reasoning_},
                  {index_key, 0},
                  {"part", part}});
    output_[open_reasoning_][parts].push_back(part);
  }
  json &item = output_[open_reasoning_];
  json &part = item[parts][0];
  part["text"].get_ref<std::string &>() += text;  // in place: no copy per delta
  reasoning_text_ += text;
  out += event(summary_ ? "response.reasoning_summary_text.delta" : "response.reasoning_text.delta",
               {{"item_id", item["id"]},
                {"output_index", open_reasoning_},
                {index_key, 0},
                {"delta", text}});
}

void ResponseBuilder::close_reasoning(std::string &out) {
  if (open_reasoning_ < 0) return;
  const int index = open_reasoning_;
  open_reasoning_ = -1;
  const json &item = output_[index];
  const json &part = item[summary_ ? "summary" : "content"][0];
  const json f{{"item_id", item["id"]},
               {"output_index", index},
               {summary_ ? "summary_index" : "content_index", 0}};
  json done = f, part_done = f;
  done["text"] = part["text"];
  part_done["part"] = part;
  out += event(summary_ ? "response.reasoning_summary_text.done" : "response.reasoning_text.done",
               done);
  out += event(summary_ ? "response.reasoning_summary_part.done" : "response.content_part.done",
               part_done);
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
}

void ResponseBuilder::open_message(std::string &out) {
  close_reasoning(out);
  if (open_message_ < 0) {
    open_message_ = static_cast<int>(output_.size());
    json item{{"id", item_id("msg_")},
              {"type", "message"},
              {"status", "in_progress"},
              {"role", "assistant"},
              {"content", json::array()}};
    output_.push_back(item);
    out += event("response.output_item.added", {{"output_index", open_message_}, {"item", item}});
    const json part = text_part("output_text", "");
    out += event("response.content_part.added", {{"item_id", item["id"]},
                                                 {"output_index", open_message_},
                                                 {"content_index", 0},
                                                 {"part", part}});
    output_[open_message_]["content"].push_back(part);
  }
}

void ResponseBuilder::on_content(const std::string &text, std::string &out) {
  if (text.empty()) return;
  open_message(out);
  json &item = output_[open_message_];
  json &part = item["content"][0];
  part["text"].get_ref<std::string &>() += text;  // in place: no copy per delta
  out += event("response.output_text.delta", {{"item_id", item["id"]},
                                              {"output_index", open_message_},
                                              {"content_index", 0},
                                              {"delta", text},
                                              {"logprobs", json::array()}});
}

void ResponseBuilder::close_message(std::string &out) {
  if (open_message_ < 0) return;
  const int index = open_message_;
  open_message_ = -1;
  json &item = output_[index];
  item["status"] = cut_off_ ? "incomplete" : "completed";
  const json &part = item["content"][0];
  out += event("response.output_text.done", {{"item_id", item["id"]},
                                             {"output_index", index},
                                             {"content_index", 0},
                                             {"text", part["text"]},
                                             {"logprobs", json::array()}});
  out += event(
      "response.content_part.done",
      {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
}

void ResponseBuilder::on_call(const ParsedToolCall &call, std::string &out) {
  // parallel_tool_calls: false allows one call per turn; an unforced model is not
  // constrained and may write more (a forced one writes exactly one), so later ones are
  // left out.
  if (!req_.parallel_tool_calls && calls_ > 0) return;
  close_reasoning(out);
  close_message(out);
  const int index = static_cast<int>(output_.size());
  const std::string call_id =
      "call_" + ctx_.id.substr(ctx_.id.find('_') + 1) + "_" + std::to_string(calls_++);
  json item{{"id", item_id("fc_")}, {"type", "function_call"}, {"status", "in_progress"},
            {"call_id", call_id},   {"name", call.name},       {"arguments", ""}};
  out += event("response.output_item.added", {{"output_index", index}, {"item", item}});
  out += event("response.function_call_arguments.delta",
               {{"item_id", item["id"]}, {"output_index", index}, {"delta", call.arguments}});
  out += event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                         {"output_index", index},
                                                         {"name", call.name},
                                                         {"arguments", call.arguments}});
  item["status"] = "completed";
  item["arguments"] = call.arguments;
  output_.push_back(item);
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
}

void ResponseBuilder::set_streaming(bool on) {
  streaming_ = on;
  // Streamed, a call's arguments come as the model writes them; the response object
  // the stream ends with is built from the same events.
  if (tools_) tools_->set_stream_arguments(on);
  reasoning_.set_stream_calls(on);
}

void ResponseBuilder::on_call_start(const std::string &name, std::string &out) {
  dropping_call_ = !req_.parallel_tool_calls && calls_ > 0;  // see on_call
  if (dropping_call_) return;
  close_reasoning(out);
  close_message(out);
  open_call_ = static_cast<int>(output_.size());
  const std::string call_id =
      "call_" + ctx_.id.substr(ctx_.id.find('_') + 1) + "_" + std::to_string(calls_++);
  json item{{"id", item_id("fc_")},
            {"type", "function_call"},
            {"status", "in_progress"},
            {"call_id", call_id},
            {"name", name},
            {"arguments", ""}};
  out += event("response.output_item.added", {{"output_index", open_call_}, {"item", item}});
  output_.push_back(std::move(item));
}

void ResponseBuilder::on_call_arguments(const std::string &fragment, std::string &out) {
  if (dropping_call_ || open_call_ < 0) return;
  json &item = output_[open_call_];
  item["arguments"].get_ref<std::string &>() += fragment;
  out += event("response.function_call_arguments.delta",
               {{"item_id", item["id"]}, {"output_index", open_call_}, {"delta", fragment}});
}

void ResponseBuilder::on_call_end(bool complete, std::string &out) {
  if (dropping_call_ || open_call_ < 0) {
    dropping_call_ = false;
    return;
  }
  const int index = std::exchange(open_call_, -1);
  json &item = output_[index];
  out += event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                         {"output_index", index},
                                                         {"name", item["name"]},
                                                         {"arguments", item["arguments"]}});
  // A call that was cut short or turned out malformed after it started: its arguments
  // are what was streamed.
  item["status"] = complete ? "completed" : "incomplete";
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
}

void ResponseBuilder::on_event(const ToolParseEvent &e, std::string &out) {
  switch (e.kind) {
    case ToolParseEvent::Kind::kText:
      on_content(e.text, out);
      break;
    case ToolParseEvent::Kind::kCall:
      on_call(e.call, out);
      break;
    case ToolParseEvent::Kind::kCallStart:
      on_call_start(e.call.name, out);
      break;
    case ToolParseEvent::Kind::kCallArgs:
      on_call_arguments(e.text, out);
      break;
    case ToolParseEvent::Kind::kCallEnd:
      on_call_end(e.complete, out);
      break;
  }
}

std::string ResponseBuilder::feed(const std::string &text) {
  std::string out;
  auto split = reasoning_.feed(text);
  if (!split.reasoning.empty()) on_reasoning(split.reasoning, out);
  if (split.content.empty()) return out;
  if (!tools_) {
    on_content(split.content, out);
    return out;
  }
  for (const auto &e : tools_->feed(split.content)) on_event(e, out);
  return out;
}

std::string ResponseBuilder::finish(FinishReason finish, const std::string &error, int input_tokens,
                                    int output_tokens, int cached_tokens) {
  std::string out;
  auto split = reasoning_.finish();
  if (!split.reasoning.empty()) on_reasoning(split.reasoning, out);
  std::vector<ToolParseEvent> events;
  if (tools_) {
    events = tools_->feed(split.content);
    auto rest = tools_->finish(finish == FinishReason::kLength);
    events.insert(events.end(), rest.begin(), rest.end());
  } else if (!split.content.empty()) {
    events.push_back({ToolParseEvent::Kind::kText, split.content, {}});
  }
  for (const auto &e : events) on_event(e, out);
  // A turn with no output at all still has its (empty) message, so clients that read
  // the message find one.
  const bool failed = finish == FinishReason::kError;
  const bool cancelled = finish == FinishReason::kAbort;
  if (output_.empty() && !failed && !cancelled) open_message(out);
  const bool length = finish == FinishReason::kLength;
  cut_off_ = length;
  close_reasoning(out);
  close_message(out);

  const char *status = failed      ? "failed"
                       : cancelled ? "cancelled"
                       : length    ? "incomplete"
                                   : "completed";
  final_ = base(status);
  final_["output"] = output_;
  if (length) final_["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (failed) final_["error"] = {{"code", "server_error"}, {"message", error}};
  int reasoning_tokens = 0;
  if (!reasoning_text_.empty())
    reasoning_tokens =
        ctx_.text ? static_cast<int>(ctx_.text->encode(reasoning_text_, false).size()) : 0;
  final_["usage"] = {
      {"input_tokens", input_tokens},
      {"input_tokens_details", {{"cached_tokens", cached_tokens}}},
      {"output_tokens", output_tokens},
      {"output_tokens_details", {{"reasoning_tokens", std::min(reasoning_tokens, output_tokens)}}},
      {"total_tokens", input_tokens + output_tokens}};
  const char *type = failed   ? "response.failed"
                     : length ? "response.incomplete"
                              : "response.completed";
  if (!cancelled) out += event(type, {{"response", final_}});
  return out;
}

}  // namespace keel::server::openai
