// Tool calls end to end inside the front: a scripted engine writes a model's tool-call
// text in random chunks through a real Generation, and the OpenAI and Anthropic
// renderers turn it into tool_calls / tool_use, streamed and not, with the same result.
// Also: tool requests (tools, tool_choice, tool results) rendered through real chat
// templates.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <thread>

#include "fakes.h"
#include "server/anthropic/anthropic_types.h"
#include "server/json_fields.h"
#include "server/openai/openai_types.h"
#include "support/paths.h"
#include "text/jinja/chat_template.h"

using namespace keel;
using namespace keel::server;
using json = nlohmann::ordered_json;

namespace {

openai::RenderContext openai_context(const std::string &id, const ModelText &text) {
  openai::RenderContext ctx;
  ctx.id = id;
  ctx.created = 1;
  ctx.model = "m";
  ctx.text = &text;
  return ctx;
}

anthropic::RenderContext anthropic_context(const std::string &id) {
  anthropic::RenderContext ctx;
  ctx.id = id;
  ctx.model = "m";
  return ctx;
}

using BytesText = keel::test::ByteText;

// Emits `script` byte-tokens in random groups of 1..6 per event, then finishes with
// kStop (or kLength when max_tokens runs out first).
class ChunkEngine final : public EngineApi {
 public:
  ChunkEngine(std::string script, unsigned seed) : script_(std::move(script)), rng_(seed) {
    thread_ = std::thread([this] { loop(); });
  }
  ~ChunkEngine() override {
    {
      std::lock_guard l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void submit(GenerationRequest r, EventSink sink) override {
    std::lock_guard l(mu_);
    live_.push_back({std::move(r), std::move(sink), 0});
    cv_.notify_all();
  }
  void abort(RequestId) override {}
  EngineStatus status() const override { return {}; }

 private:
  struct Live {
    GenerationRequest req;
    EventSink sink;
    std::size_t pos;
  };
  void loop() {
    std::unique_lock l(mu_);
    while (true) {
      cv_.wait(l, [&] { return stop_ || !live_.empty(); });
      if (stop_) return;
      Live &lv = live_.front();
      RequestEvent e;
      e.id = lv.req.id;
      const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 6)(rng_);
      for (std::size_t k = 0; k < n && lv.pos < script_.size() &&
                              static_cast<int>(lv.pos) < lv.req.sampling.max_tokens;
           ++k)
        e.tokens.push_back(static_cast<unsigned char>(script_[lv.pos++]));
      if (lv.pos >= script_.size()) e.finish = FinishReason::kStop;
      if (static_cast<int>(lv.pos) >= lv.req.sampling.max_tokens) e.finish = FinishReason::kLength;
      auto sink = lv.sink;
      if (e.finish) live_.pop_front();
      l.unlock();
      sink(e);
      l.lock();
    }
  }
  std::string script_;
  std::mt19937 rng_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Live> live_;
  bool stop_ = false;
  std::thread thread_;
};

// Runs one generation of `script`; the streamed payloads come from `on_delta`.
template <typename Delta, typename Done>
std::string run_script(const ModelText &text, const std::string &script, unsigned seed,
                       int max_tokens, Delta on_delta, Done render) {
  ChunkEngine engine(script, seed);
  auto m = std::make_shared<LoadedModel>();
  m->id = "m";
  m->engine = &engine;
  m->text = &text;
  m->info.context_length = 4096;
  std::atomic<std::uint64_t> ids{1};
  GenerationSpec spec;
  spec.prompts = {{'q'}};
  spec.sampling.max_tokens = max_tokens;
  std::promise<std::string> done;
  auto g = Generation::start(ModelLease(m, nullptr), std::move(spec), ids, on_delta,
                             [&](const Generation &gen) { done.set_value(render(gen)); });
  auto fut = done.get_future();
  EXPECT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  return fut.get();
}

json weather_tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather of a city", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Web search",
    "parameters": {"type": "object"}}}])");
}

openai::ChatRequest chat_request(json extra = json::object()) {
  json b{{"model", "m"},
         {"messages", json::array({{{"role", "user"}, {"content", "weather?"}}})},
         {"tools", weather_tools()}};
  b.update(extra);
  return openai::parse_chat(b);
}

anthropic::MessagesRequest messages_request(json extra = json::object()) {
  json b = json::parse(R"({"model": "m", "max_tokens": 100,
    "messages": [{"role": "user", "content": "weather?"}],
    "tools": [{"name": "get_weather", "description": "Weather of a city",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]}},
              {"name": "search", "description": "Web search", "input_schema": {"type": "object"}}]})");
  b.update(extra);
  return anthropic::parse_messages(b);
}

std::string param_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const ApiErrorException &e) {
    return e.error.param;
  }
  return "<no error>";
}

// What an OpenAI SDK's stream accumulator makes of the chunks.
struct OpenAIStreamed {
  std::string content;
  json tool_calls = json::array();
  std::string finish;
};

void accumulate(OpenAIStreamed &acc, const std::string &payload) {
  const json j = json::parse(payload);
  const json &c = j["choices"][0];
  const json &d = c["delta"];
  if (d.contains("content")) acc.content += d["content"].get<std::string>();
  EXPECT_TRUE(!d.contains("content") ||
              d["content"].get<std::string>().find('<') == std::string::npos)
      << "markup leaked: " << payload;
  if (d.contains("tool_calls"))
    for (const auto &tc : d["tool_calls"]) {
      const std::size_t idx = tc["index"].get<std::size_t>();
      if (idx >= acc.tool_calls.size()) {
        EXPECT_EQ(idx, acc.tool_calls.size());
        acc.tool_calls.push_back(
            {{"id", tc["id"]},
             {"type", tc["type"]},
             {"function", {{"name", tc["function"]["name"]}, {"arguments", ""}}}});
      }
      acc.tool_calls[idx]["function"]["arguments"] =
          acc.tool_calls[idx]["function"]["arguments"].get<std::string>() +
          tc["function"]["arguments"].get<std::string>();
    }
  if (!c["finish_reason"].is_null()) acc.finish = c["finish_reason"];
}

const std::string kHermesScript =
    "I will look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": "
    "\"<b>rain</b>\"}}\n</tool_call>";

}  // namespace

TEST(ToolCalls, OpenAIChatStreamedAndWholeAgreeOverRandomChunkings) {
  BytesText text;
  const auto req = chat_request();
  for (unsigned seed = 1; seed <= 25; ++seed) {
    const auto ctx = openai_context("chatcmpl-abc", text);
    const auto ctx2 = openai_context("chatcmpl-abc", text);
    OpenAIStreamed acc, acc2;
    int empty_chunks = 0;
    const std::string body = run_script(
        text, kHermesScript, seed, 1000,
        [&](const ChoiceDelta &d) {
          accumulate(acc, openai::chat_chunk_delta(ctx, req, d));
          // The split form: never an empty chunk; the name comes before its arguments.
          for (const auto &p : openai::chat_chunks(ctx2, req, d)) {
            const json c = json::parse(p)["choices"][0];
            empty_chunks += c["delta"].empty() && c["finish_reason"].is_null();
            if (c["delta"].contains("tool_calls")) {
              const json &tc = c["delta"]["tool_calls"][0];
              EXPECT_EQ(tc.contains("id"), tc["function"].contains("name"));
              if (tc.contains("id")) {
                EXPECT_EQ(tc["function"]["arguments"], "");
              }
            }
            accumulate(acc2, p);
          }
        },
        [&](const Generation &g) { return openai::render_chat(ctx, req, g); });
    EXPECT_EQ(empty_chunks, 0);
    EXPECT_EQ(acc2.content, acc.content);
    EXPECT_EQ(acc2.tool_calls, acc.tool_calls);
    EXPECT_EQ(acc2.finish, acc.finish);
    const json j = json::parse(body);
    const json &msg = j["choices"][0]["message"];
    EXPECT_EQ(msg["content"], "I will look.");
    ASSERT_EQ(msg["tool_calls"].size(), 2u);
    EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
    EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
              json::parse(R"({"city": "Paris"})"));
    EXPECT_EQ(json::parse(msg["tool_calls"][1]["function"]["arguments"].get<std::string>())["q"],
              "<b>rain</b>");
    EXPECT_NE(msg["tool_calls"][0]["id"], msg["tool_calls"][1]["id"]);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
    // The stream says the same.
    EXPECT_EQ(acc.content, "I will look.");
    EXPECT_EQ(acc.tool_calls, msg["tool_calls"]) << seed;
    EXPECT_EQ(acc.finish, "tool_calls");
  }
}

TEST(ToolCalls, OpenAIWithoutToolsOrWithToolChoiceNoneKeepsTheText) {
  BytesText text;
  for (const json &extra : {json{{"tools", nullptr}}, json{{"tool_choice", "none"}}}) {
    const auto req = chat_request(extra);
    const auto ctx = openai_context("chatcmpl-abc", text);
    OpenAIStreamed acc;
    const std::string body = run_script(
        text, kHermesScript, 3, 1000,
        [&](const ChoiceDelta &d) {
          const json j = json::parse(openai::chat_chunk_delta(ctx, req, d));
          if (j["choices"][0]["delta"].contains("content"))
            acc.content += j["choices"][0]["delta"]["content"].get<std::string>();
        },
        [&](const Generation &g) { return openai::render_chat(ctx, req, g); });
    const json j = json::parse(body);
    EXPECT_EQ(j["choices"][0]["message"]["content"], kHermesScript);
    EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(acc.content, kHermesScript);
  }
}

TEST(ToolCalls, MalformedCallIsContentAndACutOffCallIsLength) {
  BytesText text;
  const auto req = chat_request();
  const std::string bad =
      "Hi <tool_call>{\"name\": \"get_weather\", \"arguments\": {]}</tool_call>";
  const auto ctx = openai_context("chatcmpl-abc", text);
  OpenAIStreamed acc;
  std::string body = run_script(
      text, bad, 5, 1000,
      [&](const ChoiceDelta &d) { accumulate(acc, openai::chat_chunk_delta(ctx, req, d)); },
      [&](const Generation &g) { return openai::render_chat(ctx, req, g); });
  json j = json::parse(body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], bad);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  // Streamed, the call had started (its name and the arguments' brace were read) before
  // the markup went wrong: it stays a call with the arguments streamed so far, and its
  // markup is not content.
  EXPECT_EQ(acc.content, "Hi");
  ASSERT_EQ(acc.tool_calls.size(), 1u);
  EXPECT_EQ(acc.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(acc.tool_calls[0]["function"]["arguments"], "{]");
  // max_tokens ends inside the call: unstreamed, the unfinished markup is content;
  // streamed, the call keeps what was streamed; finish length both ways.
  const auto ctx2 = openai_context("chatcmpl-abd", text);
  const auto ctx3 = openai_context("chatcmpl-abd", text);
  OpenAIStreamed cut;
  const std::size_t limit = kHermesScript.find("Paris") + 2;
  body = run_script(
      text, kHermesScript, 6, static_cast<int>(limit),
      [&](const ChoiceDelta &d) {
        for (const auto &p : openai::chat_chunks(ctx3, req, d)) accumulate(cut, p);
      },
      [&](const Generation &g) { return openai::render_chat(ctx2, req, g); });
  j = json::parse(body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["message"]["content"], kHermesScript.substr(0, limit));
  EXPECT_EQ(cut.finish, "length");
  EXPECT_EQ(cut.content, "I will look.");
  ASSERT_EQ(cut.tool_calls.size(), 1u);
  EXPECT_EQ(cut.tool_calls[0]["function"]["arguments"], "{\"city\":\"Pa");
}

TEST(ToolCalls, LlamaFormatFromTheVocabulary) {
  BytesText text;
  text.single = {"<|python_tag|>"};
  const auto req = chat_request();
  const auto ctx = openai_context("chatcmpl-abc", text);
  EXPECT_EQ(openai::tool_call_format(ctx), ToolCallFormat::kLlama3Json);
  const std::string script = R"({"name": "get_weather", "parameters": {"city": "Oslo"}})";
  const json j = json::parse(run_script(
      text, script, 2, 1000, [](const ChoiceDelta &) {},
      [&](const Generation &g) { return openai::render_chat(ctx, req, g); }));
  const json &msg = j["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].is_null());
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], R"({"city":"Oslo"})");
}

TEST(ToolCalls, AnthropicToolUseStreamedAndWholeAgree) {
  BytesText text;
  const auto req = messages_request();
  for (unsigned seed = 1; seed <= 25; ++seed) {
    auto ctx = anthropic_context("msg_abc");
    anthropic::prepare_tools(ctx, req, text);
    std::string sse;
    int out_tokens = 0;
    const std::string body = run_script(
        text, kHermesScript, seed, 1000,
        [&](const ChoiceDelta &d) {
          if (d.first) sse += anthropic::stream_start(ctx, 1, 0, 0);
          out_tokens += static_cast<int>(d.tokens.size());
          sse += anthropic::stream_delta(ctx, d.text);
          if (d.finish) sse += anthropic::stream_finish(ctx, d, out_tokens);
        },
        [&](const Generation &g) { return anthropic::render_message(ctx, g); });
    const json m = json::parse(body);
    ASSERT_EQ(m["content"].size(), 3u);
    EXPECT_EQ(m["content"][0], json({{"type", "text"}, {"text", "I will look."}}));
    EXPECT_EQ(m["content"][1]["type"], "tool_use");
    EXPECT_EQ(m["content"][1]["name"], "get_weather");
    EXPECT_EQ(m["content"][1]["input"], json({{"city", "Paris"}}));
    EXPECT_EQ(m["content"][2]["input"]["q"], "<b>rain</b>");
    EXPECT_EQ(m["stop_reason"], "tool_use");
    // Rebuild the message from the events, as the SDK's stream helper does.
    json blocks = json::array();
    std::vector<std::string> partial;
    std::string stop_reason;
    std::istringstream in(sse);
    std::string line, event;
    std::vector<std::string> order;
    while (std::getline(in, line)) {
      if (line.rfind("event: ", 0) == 0) event = line.substr(7);
      if (line.rfind("data: ", 0) != 0) continue;
      const json e = json::parse(line.substr(6));
      ASSERT_EQ(e["type"], event);
      order.push_back(event);
      if (event == "content_block_start") {
        ASSERT_EQ(e["index"], blocks.size());
        blocks.push_back(e["content_block"]);
        partial.emplace_back();
      } else if (event == "content_block_delta") {
        const std::size_t i = e["index"];
        ASSERT_LT(i, blocks.size());
        if (e["delta"]["type"] == "text_delta") {
          const std::string t = e["delta"]["text"];
          EXPECT_EQ(t.find('<'), std::string::npos) << "markup leaked: " << t;
          blocks[i]["text"] = blocks[i]["text"].get<std::string>() + t;
        } else {
          ASSERT_EQ(e["delta"]["type"], "input_json_delta");
          partial[i] += e["delta"]["partial_json"].get<std::string>();
        }
      } else if (event == "content_block_stop") {
        const std::size_t i = e["index"];
        if (blocks[i]["type"] == "tool_use") blocks[i]["input"] = json::parse(partial[i]);
      } else if (event == "message_delta") {
        stop_reason = e["delta"]["stop_reason"];
      }
    }
    EXPECT_EQ(order.front(), "message_start");
    EXPECT_EQ(order.back(), "message_stop");
    EXPECT_EQ(blocks, m["content"]) << seed;
    EXPECT_EQ(stop_reason, "tool_use");
  }
}

TEST(ToolCalls, AnthropicPlainTextWithToolsAndEmptyOutput) {
  BytesText text;
  const auto req = messages_request();
  for (const std::string &script : {std::string("just words "), std::string("")}) {
    auto ctx = anthropic_context("msg_abc");
    anthropic::prepare_tools(ctx, req, text);
    std::string sse;
    const std::string body = run_script(
        text, script, 4, 1000,
        [&](const ChoiceDelta &d) {
          if (d.first) sse += anthropic::stream_start(ctx, 1, 0, 0);
          sse += anthropic::stream_delta(ctx, d.text);
          if (d.finish) sse += anthropic::stream_finish(ctx, d, 1);
        },
        [&](const Generation &g) { return anthropic::render_message(ctx, g); });
    const json m = json::parse(body);
    ASSERT_EQ(m["content"].size(), 1u);
    EXPECT_EQ(m["content"][0]["type"], "text");
    EXPECT_NE(m["stop_reason"], "tool_use");
    // Exactly one text block opened and closed in the stream.
    std::size_t starts = 0, pos = 0;
    while ((pos = sse.find("event: content_block_start", pos)) != std::string::npos)
      ++starts, ++pos;
    EXPECT_EQ(starts, 1u) << sse;
    EXPECT_NE(sse.find("event: content_block_stop"), std::string::npos);
  }
}

TEST(ToolRequests, OpenAIValidationNamesTheField) {
  auto p = [](json extra) { return param_of([&] { chat_request(extra); }); };
  EXPECT_EQ(p({{"tools", "x"}}), "tools");
  EXPECT_EQ(p({{"tools", json::array({{{"type", "code_interpreter"}}})}}), "tools[0].type");
  EXPECT_EQ(p({{"tools", json::parse(R"([{"type": "function", "function": {"name": "a b"}}])")}}),
            "tools[0].function.name");
  EXPECT_EQ(p({{"tools", json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": "x"}}])")}}),
            "tools[0].function.parameters");
  EXPECT_EQ(p({{"tool_choice", "sometimes"}}), "tool_choice");
  EXPECT_EQ(p({{"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}),
            "tool_choice.function.name");
  EXPECT_EQ(p({{"tools", nullptr}, {"tool_choice", "required"}}), "tool_choice");
  EXPECT_EQ(p({{"parallel_tool_calls", "yes"}}), "parallel_tool_calls");
  EXPECT_EQ(p({{"messages", json::parse(R"([{"role": "tool", "content": "x"}])")}}),
            "messages[0].tool_call_id");
  EXPECT_EQ(p({{"messages", json::parse(R"([{"role": "assistant", "tool_calls": [{"type":
      "function", "function": {"name": "f", "arguments": 5}}]}])")}}),
            "messages[0].tool_calls[0].function.arguments");
  EXPECT_EQ(p({{"messages", json::parse(R"([{"role": "user", "tool_calls": []}])")}}),
            "messages[0].content");
  EXPECT_EQ(p({{"messages", json::parse(R"([{"role": "user", "content": [{"type":
      "image_url", "image_url": {"url": "x"}}]}])")}}),
            "messages[0].content[0].type");
  EXPECT_EQ(p({{"messages", json::parse(R"([{"role": "function", "content": "x"}])")}}),
            "messages[0].role");
  EXPECT_EQ(p({{"messages", json::parse(R"([{"role": "user", "content": null}])")}}),
            "messages[0].content");
  // Forced calls are taken; a forced tool's schema the grammar engine refuses is named
  // where the client wrote it, another tool's is not looked at.
  EXPECT_TRUE(chat_request({{"tool_choice", "required"}}).forces_tool_call());
  auto named =
      chat_request({{"tool_choice", {{"type", "function"}, {"function", {{"name", "search"}}}}}});
  EXPECT_EQ(named.tool_choice, "function");
  EXPECT_EQ(named.tool_choice_name, "search");
  const json odd = json::parse(R"([
    {"type": "function", "function": {"name": "a"}},
    {"type": "function", "function": {"name": "b", "parameters": {"type": "object",
      "properties": {"n": {"type": "number", "multipleOf": 3}}}}}])");
  EXPECT_EQ(p({{"tools", odd}, {"tool_choice", "required"}}),
            "tools[1].function.parameters.properties.n.multipleOf");
  EXPECT_EQ(
      p({{"tools", odd}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "a"}}}}}}),
      "<no error>");
  EXPECT_EQ(p({{"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}}),
            "tool_choice");
  auto ok = chat_request({{"tool_choice", "auto"}, {"parallel_tool_calls", false}});
  EXPECT_EQ(ok.tool_choice, "auto");
  EXPECT_EQ(ok.tool_names, (std::vector<std::string>{"get_weather", "search"}));
  EXPECT_TRUE(ok.parses_tool_calls());
  EXPECT_FALSE(chat_request({{"tool_choice", "none"}}).parses_tool_calls());
}

TEST(ToolRequests, OpenAIAssistantToolCallsReachTemplatesAsObjects) {
  const auto r = chat_request({{"messages", json::parse(R"([
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"u\": 1}"}},
        {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])")}});
  const json &calls = r.messages[1]["tool_calls"];
  EXPECT_EQ(r.messages[1]["content"], "");
  EXPECT_EQ(calls[0]["function"]["arguments"], json::parse(R"({"city": "Paris", "u": 1})"));
  EXPECT_EQ(calls[0]["function"]["arguments"].begin().key(), "city");  // order kept
  EXPECT_EQ(calls[1]["function"]["arguments"], "not json");            // left as sent
  EXPECT_EQ(calls[0]["id"], "call_1");
  EXPECT_EQ(r.messages[2]["role"], "tool");
}

TEST(ToolRequests, AnthropicValidationNamesTheField) {
  auto p = [](json extra) { return param_of([&] { messages_request(extra); }); };
  EXPECT_EQ(
      p({{"tools", json::parse(R"([{"type": "web_search_20250305", "name": "web_search"}])")}}),
      "tools.0.type");
  EXPECT_EQ(p({{"tools", json::parse(R"([{"name": "f"}])")}}), "tools.0.input_schema");
  EXPECT_EQ(p({{"tools", json::parse(R"([{"name": "", "input_schema": {}}])")}}), "tools.0.name");
  EXPECT_EQ(p({{"tool_choice", "auto"}}), "tool_choice");
  EXPECT_EQ(p({{"tool_choice", {{"type", "tool"}, {"name", "nope"}}}}), "tool_choice.name");
  EXPECT_EQ(p({{"tool_choice", {{"type", "maybe"}}}}), "tool_choice.type");
  EXPECT_EQ(p({{"tools", nullptr}, {"tool_choice", {{"type", "any"}}}}), "tool_choice");
  EXPECT_EQ(p({{"tool_choice", {{"type", "any"}}}}), "<no error>");
  EXPECT_EQ(p({{"tool_choice", {{"type", "tool"}, {"name", "search"}}}}), "<no error>");
  EXPECT_EQ(p({{"tools", json::parse(R"([{"name": "f", "input_schema": {"type": "object",
      "properties": {"n": {"type": "number", "multipleOf": 3}}}}])")},
               {"tool_choice", {{"type", "any"}}}}),
            "tools.0.input_schema.properties.n.multipleOf");
  EXPECT_EQ(p({{"tool_choice", {{"type", "any"}}},
               {"output_config",
                {{"format", {{"type", "json_schema"}, {"schema", {{"type", "object"}}}}}}}}),
            "tool_choice");
  EXPECT_EQ(p({{"messages", json::parse(R"([{"role": "user", "content": [{"type": "image",
      "source": {}}]}])")}}),
            "messages.0.content.0.type");
  EXPECT_EQ(
      p({{"messages", json::parse(R"([{"role": "user", "content": [{"type": "sparkle"}]}])")}}),
      "messages.0.content.0.type");
  EXPECT_EQ(p({{"messages", json::parse(R"([{"role": "assistant", "content": [{"type":
      "tool_use", "id": "t1", "name": "f", "input": "x"}]}])")}}),
            "messages.0.content.0.input");
  EXPECT_EQ(p({{"messages", json::parse(R"([{"role": "user", "content": [{"type":
      "tool_result", "content": "x"}]}])")}}),
            "messages.0.content.0.tool_use_id");
  EXPECT_EQ(p({{"messages", json::parse(R"([{"role": "user", "content": [{"type":
      "tool_use", "id": "t", "name": "f", "input": {}}]}])")}}),
            "messages.0.content.0.type");
  EXPECT_EQ(p({{"system", json::parse(R"([{"type": "image"}])")}}), "system.0.type");
  EXPECT_EQ(p({{"metadata", "x"}}), "metadata");
  EXPECT_EQ(p({{"metadata", {{"user_id", 5}}}}), "metadata.user_id");
  EXPECT_EQ(p({{"thinking", {{"type", "enabled"}}}}), "thinking.budget_tokens");
  EXPECT_EQ(p({{"thinking", {{"type", "lots"}}}}), "thinking.type");
  EXPECT_EQ(p({{"mcp_servers", json::array({json::object()})}}), "mcp_servers");
  EXPECT_EQ(p({{"top_k", "x"}}), "top_k");
  EXPECT_EQ(p({{"stop_sequences", json::array({1})}}), "stop_sequences");
  EXPECT_EQ(p({{"some_future_field", 1}}), "<no error>");  // unknown fields are ignored
}

TEST(ToolRequests, AnthropicToolTurnsBecomeOpenAIShapedMessages) {
  const auto r = messages_request({{"messages", json::parse(R"([
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "sunny"}]}, {"type": "text", "text": "and?"}]}])")},
                                   {"tool_choice", {{"type", "auto"}}},
                                   {"metadata", {{"user_id", "u1"}}},
                                   {"thinking", {{"type", "enabled"}, {"budget_tokens", 2000}}},
                                   {"top_k", 5},
                                   {"top_p", 0.5}});
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1], json::parse(R"({"role": "assistant", "content": "Checking.",
      "reasoning_content": "hm", "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "get_weather",
      "arguments": {"city": "Paris"}}}]})"));
  EXPECT_EQ(r.messages[2], json::parse(R"({"role": "tool", "tool_call_id": "toolu_1",
      "content": "sunny"})"));
  EXPECT_EQ(r.messages[3], json::parse(R"({"role": "user", "content": "and?"})"));
  EXPECT_EQ(r.tools[0], json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "description": "Weather of a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}})"));
  EXPECT_EQ(r.tool_choice, "auto");
  EXPECT_EQ(r.thinking, "enabled");
  EXPECT_EQ(r.thinking_budget, 2000);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], true);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
}

// The same conversation through both APIs renders to the same prompt with a real
// tool-use template, and the prompt holds the tools, the call and the result as HF
// would print them.
TEST(ToolRequests, BothApisRenderTheSameToolConversation) {
  auto dir = test::testdata_dir();
  if (!dir) GTEST_SKIP() << "no ../shared/testdata";
  for (const char *name :
       {"Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"}) {
    std::ifstream f(*dir / "chat-templates" / name);
    ASSERT_TRUE(f) << name;
    std::stringstream ss;
    ss << f.rdbuf();
    ChatTemplate tmpl(ss.str(), "<s>", "</s>");
    const auto oa = chat_request({{"messages", json::parse(R"([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "toolu_1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}])")}});
    const auto an = messages_request({{"system", "Be brief."}, {"messages", json::parse(R"([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
          "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
          "content": "sunny"}]}])")}});
    const std::string p1 = tmpl.render(oa.messages, oa.tools, true);
    const std::string p2 = tmpl.render(an.messages, an.tools, true);
    EXPECT_EQ(p1, p2) << name;
    EXPECT_NE(p1.find("get_weather"), std::string::npos) << name;
    EXPECT_NE(p1.find("\"city\": \"Paris\""), std::string::npos) << name << "\n" << p1;
    EXPECT_EQ(p1.find("\\\"city"), std::string::npos) << "arguments double-encoded\n" << p1;
    EXPECT_NE(p1.find("sunny"), std::string::npos) << name;
    EXPECT_NE(p1.find("Weather of a city"), std::string::npos) << name;
  }
}
