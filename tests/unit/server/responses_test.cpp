// The Responses API without a server: input items to chat messages (and the errors that
// name the field), generated text to output items and stream events (the same items for
// any chunking, and the events rebuild them), and the bounded response store.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "fakes.h"
#include "server/json_fields.h"
#include "server/openai/response_status.h"
#include "server/openai/response_store.h"
#include "server/openai/responses_types.h"

using namespace keel;
using namespace keel::server;
using namespace keel::server::openai;
using json = nlohmann::ordered_json;

namespace {

ResponsesRequest parse(const json &body, PreviousLookup previous = nullptr,
                       ItemLookup items = nullptr) {
  return parse_responses(body, previous, items);
}

std::string param_of(const json &body, PreviousLookup previous = nullptr,
                     ItemLookup items = nullptr) {
  try {
    parse(body, previous, items);
  } catch (const ApiErrorException &e) {
    EXPECT_EQ(e.error.status, 400);
    EXPECT_EQ(e.error.message.rfind(e.error.param + ":", 0), 0u) << e.error.message;
    return e.error.param;
  }
  return "<no error>";
}

json body_with(json extra) {
  json b{{"model", "m"}, {"input", "hi"}};
  b.update(extra);
  return b;
}

const json kWeatherTool = json::parse(R"({"type": "function", "name": "get_weather",
  "description": "Weather of a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}, "strict": false})");

}  // namespace

TEST(ResponsesParse, StringInputIsOneUserMessage) {
  auto r = parse(body_with({{"instructions", "Be brief."}, {"max_output_tokens", 7}}));
  EXPECT_EQ(r.chat.messages, json::parse(R"([{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "hi"}])"));
  EXPECT_EQ(r.chat.max_tokens, 7);
  EXPECT_TRUE(r.store);
  EXPECT_EQ(r.conversation.size(), 1u);
}

TEST(ResponsesParse, ItemsBecomeChatTurns) {
  const json input = json::parse(R"([
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Dev."}]},
    {"role": "user", "content": "Weather in Paris?"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
    {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]}
  ])");
  auto r = parse(body_with(
      {{"input", input}, {"instructions", "Sys."}, {"tools", json::array({kWeatherTool})}}));
  const json &m = r.chat.messages;
  ASSERT_EQ(m.size(), 5u) << m.dump(1);
  EXPECT_EQ(m[0], (json{{"role", "system"}, {"content", "Sys.\n\nDev."}}));
  EXPECT_EQ(m[1], (json{{"role", "user"}, {"content", "Weather in Paris?"}}));
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["reasoning_content"], "Look it up.");
  ASSERT_EQ(m[2]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "c1");
  // Arguments reach the template as an object, as for chat completions.
  EXPECT_EQ(m[2]["tool_calls"][1]["function"]["arguments"], (json{{"city", "Rome"}}));
  EXPECT_EQ(m[3], (json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}));
  EXPECT_EQ(m[4]["content"], "rain");
  EXPECT_EQ(r.chat.tool_names, std::vector<std::string>{"get_weather"});
  EXPECT_EQ(r.chat.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(r.tools[0]["name"], "get_weather");  // echoed as given
}

TEST(ResponsesParse, BadInputNamesTheField) {
  auto items = [](const char *text) { return body_with({{"input", json::parse(text)}}); };
  EXPECT_EQ(param_of(items(R"([{"role": "user", "content": "a"}, {"type": "message", "role": "user",
    "content": "b"}, {"type": "function_call_output", "call_id": "nope", "output": "x"}])")),
            "input[2].call_id");
  EXPECT_EQ(param_of(items(R"([{"type": "web_search_call", "id": "x"}])")), "input[0].type");
  EXPECT_EQ(param_of(items(R"([{"content": "no role or type"}])")), "input[0].type");
  EXPECT_EQ(param_of(items(R"([{"role": "user", "content": [{"type": "input_image",
    "image_url": "x"}]}])")),
            "input[0].content[0].type");
  EXPECT_EQ(param_of(items(R"([{"role": "tool", "content": "x"}])")), "input[0].role");
  EXPECT_EQ(param_of(items(R"([{"type": "function_call", "call_id": "c", "name": "f"}])")),
            "input[0].arguments");
  EXPECT_EQ(param_of(items(R"([{"type": "function_call", "name": "f", "arguments": "{}"}])")),
            "input[0].call_id");
  EXPECT_EQ(param_of(items(R"([{"role": "user", "content": [{"type": "input_text"}]}])")),
            "input[0].content[0].text");
  EXPECT_EQ(param_of(items(R"(["just a string"])")), "input[0]");
  EXPECT_EQ(param_of(items(R"([])")), "input");
  EXPECT_EQ(param_of(body_with({{"input", 5}})), "input");
  EXPECT_EQ(param_of(json{{"model", "m"}}), "input");
  EXPECT_EQ(param_of(json{{"input", "x"}}), "model");
}

TEST(ResponsesParse, ToolsAndOptionsNameTheField) {
  const json web = {{"type", "web_search"}};
  const json ns = json::parse(R"({"type": "namespace", "name": "agents", "tools": []})");
  // Codex sends web_search and namespaces on every turn: they are left out.
  auto r = parse(body_with({{"tools", json::array({web, kWeatherTool, ns})}}));
  EXPECT_EQ(r.chat.tool_names, std::vector<std::string>{"get_weather"});
  EXPECT_EQ(
      param_of(body_with({{"tools", json::array({kWeatherTool, {{"type", "file_search"}}})}})),
      "tools[1].type");
  json bad = kWeatherTool;
  bad["name"] = "has space";
  EXPECT_EQ(param_of(body_with({{"tools", json::array({bad})}})), "tools[0].name");
  const json tools = json::array({kWeatherTool});
  EXPECT_TRUE(
      parse(body_with({{"tools", tools}, {"tool_choice", "required"}})).chat.forces_tool_call());
  const auto named = parse(body_with(
      {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}}}));
  EXPECT_EQ(named.chat.tool_choice_name, "get_weather");
  EXPECT_EQ(param_of(body_with(
                {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "nope"}}}})),
            "tool_choice.name");
  EXPECT_EQ(parse(body_with({{"tools", tools}, {"tool_choice", "none"}})).chat.parses_tool_calls(),
            false);
  EXPECT_EQ(param_of(body_with({{"text", {{"format", {{"type", "json_schema"}}}}}})),
            "text.format.schema");
  EXPECT_EQ(parse(body_with({{"text", {{"format", {{"type", "json_object"}}}}}}))
                .chat.sampling.constraint_kind,
            "json_object");
  EXPECT_EQ(param_of(body_with(
                {{"text",
                  {{"format",
                    {{"type", "json_schema"},
                     {"name", "n"},
                     {"schema",
                      {{"type", "object"},
                       {"properties", {{"n", {{"type", "number"}, {"multipleOf", 3}}}}}}}}}}}})),
            "text.format.schema.properties.n.multipleOf");
  EXPECT_EQ(
      param_of(body_with(
          {{"text", {{"format", {{"type", "text"}}}}}, {"tool_choice", "auto"}, {"tools", tools}})),
      "<no error>");
  EXPECT_EQ(param_of(body_with({{"reasoning", {{"effort", "huge"}}}})), "reasoning.effort");
  EXPECT_EQ(param_of(body_with({{"reasoning", {{"summary", 3}}}})), "reasoning.summary");
  EXPECT_EQ(param_of(body_with({{"max_output_tokens", 0}})), "max_output_tokens");
  EXPECT_EQ(param_of(body_with({{"temperature", "hot"}})), "temperature");
  EXPECT_EQ(param_of(body_with({{"metadata", {{"k", 1}}}})), "metadata.k");
  EXPECT_EQ(param_of(body_with({{"background", true}, {"store", false}})), "background");
  EXPECT_EQ(param_of(body_with({{"instructions", 5}})), "instructions");
  auto ok = parse(body_with({{"reasoning", {{"effort", "low"}, {"summary", "auto"}}},
                             {"prompt_cache_key", "k"},
                             {"include", json::array({"reasoning.encrypted_content"})},
                             {"store", false},
                             {"parallel_tool_calls", false},
                             {"user", "u"},
                             {"metadata", {{"a", "b"}}}}));
  EXPECT_EQ(ok.reasoning_effort, "low");
  EXPECT_EQ(ok.reasoning_summary, "auto");
  EXPECT_FALSE(ok.store);
  EXPECT_FALSE(ok.parallel_tool_calls);
}

TEST(ResponsesParse, PreviousResponseContinuesItsConversation) {
  const json earlier = json::parse(R"([{"type": "message", "role": "user", "content": "weather?"},
    {"type": "function_call", "id": "fc_1", "call_id": "c9", "name": "get_weather",
     "arguments": "{}", "status": "completed"}])");
  PreviousLookup lookup = [&](const std::string &id) -> std::optional<json> {
    if (id == "resp_1") return earlier;
    return std::nullopt;
  };
  const json out = json::parse(R"([{"type": "function_call_output", "call_id": "c9",
    "output": "sunny"}])");
  auto r = parse(body_with({{"input", out}, {"previous_response_id", "resp_1"}}), lookup);
  EXPECT_EQ(r.conversation.size(), 3u);
  ASSERT_EQ(r.chat.messages.size(), 3u);
  EXPECT_EQ(r.chat.messages[2]["role"], "tool");
  EXPECT_EQ(param_of(body_with({{"previous_response_id", "resp_gone"}}), lookup),
            "previous_response_id");
  // item_reference: a stored item stands in for itself.
  ItemLookup items = [&](const std::string &id) -> std::optional<json> {
    if (id == "fc_1") return earlier[1];
    return std::nullopt;
  };
  auto ref = parse(body_with({{"input", json::parse(R"([{"type": "item_reference", "id": "fc_1"},
    {"type": "function_call_output", "call_id": "c9", "output": "sunny"}])")}}),
                   nullptr, items);
  EXPECT_EQ(ref.conversation[0], earlier[1]);
  EXPECT_EQ(ref.chat.messages[0]["tool_calls"][0]["id"], "c9");
  EXPECT_EQ(param_of(body_with({{"input", json::parse(R"([{"type": "item_reference",
    "id": "fc_404"}])")}}),
                     nullptr, items),
            "input[0].id");
  // A call id from another conversation is not one of this one's.
  EXPECT_EQ(param_of(body_with({{"input", out}})), "input[0].call_id");
}

namespace {

struct Built {
  json output;
  json response;
  std::vector<json> events;
};

// Feeds `text` in random chunks (one chunk when seed is 0) and collects the events.
Built build(const std::string &text, unsigned seed, const ResponsesRequest &req,
            bool prompt_opens = false, FinishReason finish = FinishReason::kStop) {
  static keel::test::ByteText bytes;
  ResponseContext ctx;
  ctx.id = "resp_abc";
  ctx.created_at = 1;
  ctx.model = "m";
  ctx.text = &bytes;
  ctx.prompt_opens_reasoning = prompt_opens;
  ResponseBuilder b(ctx, req);
  b.set_streaming(true);
  std::string sse = b.start_events();
  std::mt19937 rng(seed);
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t n =
        seed ? std::uniform_int_distribution<std::size_t>(1, 5)(rng) : text.size();
    sse += b.feed(text.substr(at, n));
    at += n;
  }
  sse += b.finish(finish, "", 10, static_cast<int>(text.size()), 4);
  Built out{b.output(), b.response(), {}};
  for (std::size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos;) {
    const std::size_t end = sse.find('\n', at);
    out.events.push_back(json::parse(sse.substr(at + 6, end - at - 6)));
    at = end;
  }
  return out;
}

// Rebuilds the output from the events as the SDKs' stream accumulators do.
json accumulate(const std::vector<json> &events) {
  json output = json::array();
  for (const auto &e : events) {
    const std::string t = e["type"];
    if (t == "response.output_item.added") {
      EXPECT_EQ(e["output_index"], output.size());
      output.push_back(e["item"]);
    } else if (t == "response.output_item.done") {
      EXPECT_EQ(output[e["output_index"].get<int>()]["id"], e["item"]["id"]);
      output[e["output_index"].get<int>()] = e["item"];
    } else if (t == "response.content_part.added") {
      json &item = output[e["output_index"].get<int>()];
      EXPECT_EQ(item["id"], e["item_id"]);
      item["content"].push_back(e["part"]);
    } else if (t == "response.reasoning_summary_part.added") {
      output[e["output_index"].get<int>()]["summary"].push_back(e["part"]);
    } else if (t == "response.output_text.delta" || t == "response.reasoning_text.delta") {
      json &part = output[e["output_index"].get<int>()]["content"][e["content_index"].get<int>()];
      part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
    } else if (t == "response.reasoning_summary_text.delta") {
      json &part = output[e["output_index"].get<int>()]["summary"][e["summary_index"].get<int>()];
      part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
    } else if (t == "response.function_call_arguments.delta") {
      json &item = output[e["output_index"].get<int>()];
      item["arguments"] = item["arguments"].get<std::string>() + e["delta"].get<std::string>();
    }
  }
  return output;
}

ResponsesRequest tool_request(json extra = json::object()) {
  json b = body_with(json{{"tools", json::array({kWeatherTool})}});
  b.update(extra);
  return parse(b, nullptr);
}

}  // namespace

TEST(ResponseBuilder, ToolCallsBecomeFunctionCallItemsForAnyChunking) {
  const std::string script =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Rome\"}}\n</tool_call>";
  const auto req = tool_request();
  const Built whole = build(script, 0, req);
  const json &out = whole.output;
  ASSERT_EQ(out.size(), 3u) << out.dump(1);
  EXPECT_EQ(out[0]["type"], "message");
  EXPECT_EQ(out[0]["content"][0]["text"], "Let me check.");
  EXPECT_EQ(out[1]["type"], "function_call");
  EXPECT_EQ(out[1]["name"], "get_weather");
  EXPECT_EQ(json::parse(out[1]["arguments"].get<std::string>()), (json{{"city", "Paris"}}));
  EXPECT_EQ(out[2]["arguments"], "{\"city\":\"Rome\"}");
  EXPECT_NE(out[1]["call_id"], out[2]["call_id"]);
  EXPECT_NE(out[1]["id"], out[2]["id"]);
  EXPECT_EQ(whole.response["status"], "completed");
  for (unsigned seed = 1; seed < 30; ++seed) {
    const Built b = build(script, seed, req);
    EXPECT_EQ(b.output, out) << "seed " << seed;
    EXPECT_EQ(accumulate(b.events), out) << "seed " << seed;
  }
  // parallel_tool_calls false: one call per turn.
  const Built one = build(script, 4, tool_request({{"parallel_tool_calls", false}}));
  ASSERT_EQ(one.output.size(), 2u);
  EXPECT_EQ(one.output[1], out[1]);
  EXPECT_EQ(accumulate(one.events), one.output);
  // tool_choice none: the markup stays text.
  const Built none = build(script, 3, tool_request({{"tool_choice", "none"}}));
  ASSERT_EQ(none.output.size(), 1u);
  EXPECT_EQ(none.output[0]["content"][0]["text"], script);
}

TEST(ResponseBuilder, EventsAreOrderedAndNumbered) {
  const Built b = build("hello there", 5, parse(body_with(json::object())));
  ASSERT_GE(b.events.size(), 8u);
  for (std::size_t i = 0; i < b.events.size(); ++i) EXPECT_EQ(b.events[i]["sequence_number"], i);
  EXPECT_EQ(b.events[0]["type"], "response.created");
  EXPECT_EQ(b.events[0]["response"]["status"], "in_progress");
  EXPECT_EQ(b.events[1]["type"], "response.in_progress");
  EXPECT_EQ(b.events[2]["type"], "response.output_item.added");
  EXPECT_EQ(b.events[3]["type"], "response.content_part.added");
  const std::vector<std::string> tail{"response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"};
  for (std::size_t k = 0; k < tail.size(); ++k)
    EXPECT_EQ(b.events[b.events.size() - tail.size() + k]["type"], tail[k]);
  const json &done = b.events.back()["response"];
  EXPECT_EQ(done["output"], b.output);
  EXPECT_EQ(done["usage"],
            json::parse(R"({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4},
              "output_tokens": 11, "output_tokens_details": {"reasoning_tokens": 0},
              "total_tokens": 21})"));
  EXPECT_EQ(accumulate(b.events), b.output);
}

TEST(ResponseBuilder, ThinkingBecomesAReasoningItem) {
  const std::string script = "<think>\nThe user greets.\n</think>\n\nHello!";
  // With reasoning.summary "none", reasoning is reasoning_text content.
  const auto raw_req = parse(body_with({{"reasoning", {{"summary", "none"}}}}));
  const Built plain = build(script, 0, raw_req);
  ASSERT_EQ(plain.output.size(), 2u) << plain.output.dump(1);
  EXPECT_EQ(plain.output[0]["type"], "reasoning");
  EXPECT_EQ(plain.output[0]["summary"], json::array());
  EXPECT_EQ(plain.output[0]["content"][0],
            (json{{"type", "reasoning_text"}, {"text", "The user greets."}}));
  EXPECT_EQ(plain.output[1]["content"][0]["text"], "Hello!");
  EXPECT_EQ(plain.response["usage"]["output_tokens_details"]["reasoning_tokens"], 16);
  // Otherwise (asked for or not) it is the summary, which every client reads.
  const auto req = parse(body_with({{"reasoning", {{"summary", "auto"}}}}));
  const Built summary = build(script, 0, req);
  EXPECT_EQ(summary.output[0]["summary"][0],
            (json{{"type", "summary_text"}, {"text", "The user greets."}}));
  EXPECT_FALSE(summary.output[0].contains("content"));
  EXPECT_EQ(build(script, 0, parse(body_with(json::object()))).output, summary.output);
  for (unsigned seed = 1; seed < 20; ++seed) {
    EXPECT_EQ(build(script, seed, req).output, summary.output) << seed;
    const Built p = build(script, seed, raw_req);
    EXPECT_EQ(accumulate(p.events), plain.output) << seed;
    EXPECT_EQ(accumulate(build(script, seed, req).events), summary.output) << seed;
  }
  // A prompt that opened the block: everything up to </think> is reasoning.
  const Built opened = build("still thinking</think>Done.", 2, req, true);
  ASSERT_EQ(opened.output.size(), 2u);
  EXPECT_EQ(opened.output[0]["summary"][0]["text"], "still thinking");
  EXPECT_EQ(opened.output[1]["content"][0]["text"], "Done.");
}

TEST(ResponseBuilder, FinishStates) {
  const auto req = parse(body_with({{"max_output_tokens", 3}}));
  const Built cut = build("abc", 1, req, false, FinishReason::kLength);
  EXPECT_EQ(cut.response["status"], "incomplete");
  EXPECT_EQ(cut.response["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(cut.output[0]["status"], "incomplete");
  EXPECT_EQ(cut.events.back()["type"], "response.incomplete");
  const Built failed = build("ab", 1, req, false, FinishReason::kError);
  EXPECT_EQ(failed.response["status"], "failed");
  EXPECT_EQ(failed.events.back()["type"], "response.failed");
  // No text at all still gives one (empty) message.
  const Built empty = build("", 0, req);
  ASSERT_EQ(empty.output.size(), 1u);
  EXPECT_EQ(empty.output[0]["content"][0]["text"], "");
  EXPECT_EQ(accumulate(empty.events), empty.output);
}

TEST(ResponseStore, BoundedByCountBytesAndTime) {
  auto now = ResponseStore::Clock::time_point{};
  ResponseStoreLimits limits;
  limits.max_entries = 3;
  limits.max_bytes = 400;
  limits.ttl = std::chrono::seconds(60);
  ResponseStore store(limits, [&] { return now; });
  auto entry = [](int n) {
    return StoredResponse{json{{"id", n}}, json::array({std::string(50, 'x')}), 0, nullptr};
  };
  for (int i = 0; i < 5; ++i) store.put("r" + std::to_string(i), entry(i));
  EXPECT_EQ(store.size(), 3u);  // the two oldest went
  EXPECT_FALSE(store.get("r0"));
  EXPECT_FALSE(store.get("r1"));
  EXPECT_EQ(store.get("r4")->response["id"], 4);
  // Bytes: a big entry pushes out old ones; one larger than the bound is not kept.
  store.put("big", {json{{"id", 9}}, json::array({std::string(250, 'y')}), 0, nullptr});
  EXPECT_TRUE(store.get("big"));
  EXPECT_LE(store.bytes(), limits.max_bytes);
  EXPECT_FALSE(store.get("r2"));  // the oldest made room
  EXPECT_TRUE(store.get("r3"));
  store.put("huge", {json{{"id", 10}}, json::array({std::string(1000, 'z')}), 0, nullptr});
  EXPECT_FALSE(store.get("huge"));
  EXPECT_LE(store.bytes(), limits.max_bytes);
  // Time: entries expire after the TTL.
  now += std::chrono::seconds(59);
  EXPECT_TRUE(store.get("big"));
  now += std::chrono::seconds(2);
  EXPECT_FALSE(store.get("big"));
  // Items of stored conversations, by id (item_reference).
  store.put("withitems", {json{{"id", "withitems"}},
                          json::parse(R"([{"type": "message", "role": "user", "content": "q"},
                            {"id": "msg_1", "type": "message", "role": "assistant",
                             "content": [{"type": "output_text", "text": "a"}]}])"),
                          1, nullptr});
  ASSERT_TRUE(store.find_item("msg_1"));
  EXPECT_EQ((*store.find_item("msg_1"))["content"][0]["text"], "a");
  EXPECT_FALSE(store.find_item("msg_2"));
  store.erase("withitems");
  EXPECT_FALSE(store.find_item("msg_1"));
  // settle and erase.
  store.put("a", entry(1));
  EXPECT_EQ(store.settle("a", json{{"id", 2}}, json::array()), SettleOutcome::kSettled);
  EXPECT_EQ(store.get("a")->response["id"], 2);
  EXPECT_TRUE(store.erase("a"));
  EXPECT_FALSE(store.erase("a"));
  EXPECT_EQ(store.settle("a", json{}, json{}), SettleOutcome::kGone);
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
}

TEST(ResponsesParse, ReasoningEffortIsATemplateVariable) {
  // Templates (gpt-oss's, keel's harmony prompt) read it.
  EXPECT_EQ(parse(body_with({{"reasoning", {{"effort", "high"}}}})).chat.template_kwargs,
            json({{"reasoning_effort", "high"}}));
  EXPECT_FALSE(parse(body_with(json::object())).chat.template_kwargs.contains("reasoning_effort"));
}

// The status state machine: forward only, terminal states final.
TEST(ResponseStatus, TerminalStatesAreFinal) {
  using S = ResponseStatus;
  const S all[] = {S::kQueued,    S::kInProgress, S::kCompleted,
                   S::kCancelled, S::kFailed,     S::kIncomplete};
  for (S from : all) {
    EXPECT_EQ(parse_response_status(response_status_name(from)), from);
    for (S to : all)
      EXPECT_EQ(may_transition(from, to),
                !is_terminal(from) && !(from == S::kInProgress && to == S::kQueued))
          << response_status_name(from) << " -> " << response_status_name(to);
  }
  EXPECT_FALSE(parse_response_status("done"));
}

namespace {

// A running background response as api_responses.cpp stores it, with a cancel hook
// that counts its calls.
struct Running {
  std::shared_ptr<std::atomic<int>> stops = std::make_shared<std::atomic<int>>(0);
  StoredResponse entry(const std::string &id) const {
    auto n = stops;
    return {json{{"id", id}, {"status", "in_progress"}, {"background", true}, {"usage", nullptr}},
            json::array({json{{"type", "message"}, {"role", "user"}, {"content", "q"}}}), 1,
            [n] { ++*n; }};
  }
};

json final_response(const std::string &id, const char *status) {
  json r{{"id", id},
         {"status", status},
         {"background", true},
         {"error", nullptr},
         {"incomplete_details", nullptr},
         {"usage", {{"output_tokens", 7}}}};
  if (std::string(status) == "failed") r["error"] = {{"code", "server_error"}, {"message", "x"}};
  if (std::string(status) == "incomplete")
    r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  return r;
}

json with_output(json conversation) {
  conversation.push_back({{"id", "msg_out"}, {"type", "message"}, {"role", "assistant"}});
  return conversation;
}

}  // namespace

// The issue-33 bug: cancel answered "cancelled", then the generation finished and the
// next retrieve said "completed". Whichever order they land in, it stays cancelled.
TEST(ResponseStore, CancelBeforeFinishStaysCancelled) {
  for (const char *finish : {"completed", "incomplete", "cancelled", "failed"}) {
    ResponseStore store;
    Running run;
    store.put("r", run.entry("r"));
    const CancelResult c = store.cancel("r");
    EXPECT_EQ(c.outcome, CancelOutcome::kCancelled);
    EXPECT_EQ(c.response["status"], "cancelled");
    EXPECT_EQ(*run.stops, 1);  // the generation was told to stop
    EXPECT_EQ(store.get("r")->response["status"], "cancelled");
    const auto conv = with_output(store.get("r")->conversation);
    // Even a "cancelled" finish keeps the entry's own terminal state (the same here).
    EXPECT_EQ(store.settle("r", final_response("r", finish), conv), SettleOutcome::kKeptTerminal)
        << finish;
    const auto got = store.get("r");
    EXPECT_EQ(got->response["status"], "cancelled") << finish;
    EXPECT_EQ(got->response["error"], nullptr) << finish;
    EXPECT_EQ(got->response["incomplete_details"], nullptr) << finish;
    EXPECT_EQ(got->response["usage"]["output_tokens"], 7) << finish;  // what it produced
    EXPECT_EQ(got->conversation.size(), 2u);
    EXPECT_FALSE(got->cancel);
    // A second cancel changes nothing and stops nothing again.
    EXPECT_EQ(store.cancel("r").outcome, CancelOutcome::kEnded);
    EXPECT_EQ(*run.stops, 1);
  }
}

TEST(ResponseStore, FinishBeforeCancelKeepsTheFinish) {
  for (const char *finish : {"completed", "incomplete", "failed"}) {
    ResponseStore store;
    Running run;
    store.put("r", run.entry("r"));
    EXPECT_EQ(store.settle("r", final_response("r", finish), json::array()),
              SettleOutcome::kSettled);
    const CancelResult c = store.cancel("r");
    EXPECT_EQ(c.outcome, CancelOutcome::kEnded);
    EXPECT_EQ(c.response["status"], finish);
    EXPECT_EQ(store.get("r")->response["status"], finish);
    EXPECT_EQ(*run.stops, 0);  // nothing left to stop
  }
}

// An engine crash fails the generation: after a cancel it stays cancelled (the error is
// not attached); before one, it is failed and the cancel leaves it failed.
TEST(ResponseStore, CancelVersusEngineCrash) {
  ResponseStore store;
  Running run;
  store.put("a", run.entry("a"));
  store.cancel("a");
  EXPECT_EQ(store.settle("a", final_response("a", "failed"), json::array()),
            SettleOutcome::kKeptTerminal);
  EXPECT_EQ(store.get("a")->response["status"], "cancelled");
  EXPECT_EQ(store.get("a")->response["error"], nullptr);
  store.put("b", run.entry("b"));
  store.settle("b", final_response("b", "failed"), json::array());
  EXPECT_EQ(store.cancel("b").response["status"], "failed");
  EXPECT_EQ(store.get("b")->response["error"]["code"], "server_error");
}

// previous_response_id reads the stored conversation: while it runs there is none to
// continue (api_responses.cpp refuses it); once cancelled, the conversation is the one
// stored, and continuing from it does not change the cancelled response.
TEST(ResponseStore, CancelVersusPreviousResponseId) {
  ResponseStore store;
  Running run;
  store.put("r", run.entry("r"));
  EXPECT_EQ(store.get("r")->response["status"], "in_progress");
  store.cancel("r");
  const auto mid = store.get("r");  // between the cancel and the generation's end
  EXPECT_EQ(mid->response["status"], "cancelled");
  EXPECT_EQ(mid->conversation.size(), 1u);
  store.settle("r", final_response("r", "completed"), with_output(mid->conversation));
  const auto after = store.get("r");
  EXPECT_EQ(after->response["status"], "cancelled");
  ASSERT_EQ(after->conversation.size(), 2u);
  // A follow-up stored beside it (what previous_response_id makes) leaves it as it was.
  store.put("next",
            {final_response("next", "completed"), with_output(after->conversation), 2, nullptr});
  EXPECT_EQ(store.get("r")->response["status"], "cancelled");
  EXPECT_EQ(store.get("next")->conversation.size(), 3u);
}

// Eviction (count, bytes, TTL) and DELETE against a running response: a later
// retrieve, cancel or settle finds nothing and brings nothing back, and the running
// generation is told to stop (nobody can read its result).
TEST(ResponseStore, EvictionVersusRetrieveAndSettle) {
  auto now = ResponseStore::Clock::time_point{};
  ResponseStoreLimits limits;
  limits.max_entries = 1;
  limits.ttl = std::chrono::seconds(60);
  ResponseStore store(limits, [&] { return now; });
  Running run;
  store.put("old", run.entry("old"));
  store.put("new", run.entry("new"));  // evicts "old" while it runs
  EXPECT_EQ(*run.stops, 1);
  EXPECT_FALSE(store.get("old"));
  EXPECT_EQ(store.cancel("old").outcome, CancelOutcome::kGone);
  EXPECT_EQ(store.settle("old", final_response("old", "completed"), json::array()),
            SettleOutcome::kGone);
  EXPECT_FALSE(store.get("old"));
  EXPECT_TRUE(store.get("new"));
  // TTL.
  now += std::chrono::seconds(61);
  EXPECT_FALSE(store.get("new"));
  EXPECT_EQ(*run.stops, 2);
  EXPECT_EQ(store.settle("new", final_response("new", "completed"), json::array()),
            SettleOutcome::kGone);
  // DELETE.
  store.put("d", run.entry("d"));
  EXPECT_TRUE(store.erase("d"));
  EXPECT_EQ(*run.stops, 3);
  EXPECT_EQ(store.settle("d", final_response("d", "completed"), json::array()),
            SettleOutcome::kGone);
  // A finished entry that is evicted stops nothing.
  store.put("f", run.entry("f"));
  store.settle("f", final_response("f", "completed"), json::array());
  store.put("g", {final_response("g", "completed"), json::array(), 0, nullptr});
  EXPECT_EQ(*run.stops, 3);
  EXPECT_EQ(store.size(), 1u);
}

// A cancel hook that settles from inside itself (a generation ending at once on abort)
// does not deadlock: the store calls hooks outside its lock.
TEST(ResponseStore, HooksRunOutsideTheLock) {
  ResponseStore store;
  StoredResponse e{json{{"status", "in_progress"}}, json::array(), 0, nullptr};
  e.cancel = [&store] { store.settle("r", final_response("r", "cancelled"), json::array()); };
  store.put("r", e);
  EXPECT_EQ(store.cancel("r").outcome, CancelOutcome::kCancelled);
  EXPECT_EQ(store.get("r")->response["usage"]["output_tokens"], 7);
  store.put("s", e);
  EXPECT_TRUE(store.erase("s"));  // its hook settles "r", which is still there
}

// Cancel and finish from two threads, many times: every order ends cancelled or in the
// finish's own state, never a cancel that reported "cancelled" followed by another state.
TEST(ResponseStore, ConcurrentCancelAndFinish) {
  for (int i = 0; i < 300; ++i) {
    ResponseStore store;
    Running run;
    store.put("r", run.entry("r"));
    CancelResult c;
    std::thread finisher(
        [&] { store.settle("r", final_response("r", "completed"), json::array()); });
    c = store.cancel("r");
    finisher.join();
    const std::string final_status = store.get("r")->response["status"];
    if (c.outcome == CancelOutcome::kCancelled) {
      EXPECT_EQ(final_status, "cancelled");
    } else {
      ASSERT_EQ(c.outcome, CancelOutcome::kEnded);
      EXPECT_EQ(final_status, "completed");
      EXPECT_EQ(c.response["status"], "completed");
    }
  }
}
