// Reasoning in the wire formats: a leading <think> block becomes an Anthropic thinking
// block (streamed as thinking_delta with a signature_delta) and OpenAI reasoning_content
// / reasoning, the answer stays content; plus the Messages fields Claude Code sends.
#include <gtest/gtest.h>

#include <future>

#include "server/anthropic/anthropic_types.h"
#include "server/json_fields.h"
#include "server/openai/openai_types.h"
#include "unit/server/fakes.h"

using namespace keel;
using namespace keel::server;
using json = nlohmann::ordered_json;

namespace {

struct Fixture {
  explicit Fixture(std::string script) : engine(std::move(script)) {}
  test::ByteText text;
  test::ScriptEngine engine;
  std::atomic<std::uint64_t> ids{1};

  // Runs the script once (max_tokens = its length); returns the deltas and the render.
  template <typename Render>
  std::pair<std::vector<ChoiceDelta>, std::string> run(int max_tokens, Render render) {
    auto m = std::make_shared<LoadedModel>();
    m->id = "m";
    m->engine = &engine;
    m->text = &text;
    m->info.context_length = 4096;
    GenerationSpec spec;
    spec.prompts = {{'q'}};
    spec.sampling.max_tokens = max_tokens;
    auto deltas = std::make_shared<std::vector<ChoiceDelta>>();
    std::promise<std::string> done;
    auto g = Generation::start(
        ModelLease(m, nullptr), std::move(spec), ids,
        [deltas](const ChoiceDelta &d) { deltas->push_back(d); },
        [&](const Generation &gen) { done.set_value(render(gen)); });
    auto fut = done.get_future();
    EXPECT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    return {*deltas, fut.get()};
  }
};

struct SseEvent {
  std::string name;
  json data;
};

std::vector<SseEvent> parse_sse(const std::string &sse) {
  std::vector<SseEvent> out;
  std::size_t pos = 0;
  while ((pos = sse.find("event: ", pos)) != std::string::npos) {
    const auto nl = sse.find('\n', pos);
    const auto data = sse.find("data: ", nl);
    const auto end = sse.find('\n', data);
    out.push_back(
        {sse.substr(pos + 7, nl - pos - 7), json::parse(sse.substr(data + 6, end - data - 6))});
    pos = end;
  }
  return out;
}

std::string anthropic_stream(const anthropic::RenderContext &ctx,
                             const std::vector<ChoiceDelta> &deltas) {
  std::string sse = anthropic::stream_start(ctx, 1, 0, 0);
  for (const auto &d : deltas) {
    if (!d.text.empty()) sse += anthropic::stream_delta(ctx, d.text);
    if (d.finish) sse += anthropic::stream_finish(ctx, d, 5);
  }
  return sse;
}

const std::string kScript = "<think>\nplan it</think>\n\nanswer";

}  // namespace

TEST(AnthropicThinking, AThinkBlockBecomesAThinkingContentBlock) {
  Fixture f(kScript);
  anthropic::RenderContext ctx{"msg_1", "m"};
  auto [deltas, body] = f.run(static_cast<int>(kScript.size()), [&](const Generation &g) {
    return anthropic::render_message(ctx, g);
  });
  const json j = json::parse(body);
  ASSERT_EQ(j["content"].size(), 2u) << body;
  EXPECT_EQ(j["content"][0]["type"], "thinking");
  EXPECT_EQ(j["content"][0]["thinking"], "plan it");
  EXPECT_EQ(j["content"][0]["signature"], anthropic::thinking_signature("plan it"));
  EXPECT_EQ(j["content"][1], json({{"type", "text"}, {"text", "answer"}}));
  EXPECT_EQ(j["stop_reason"], "max_tokens");

  // Streamed one byte at a time: the same blocks, thinking first with its signature.
  anthropic::RenderContext sctx{"msg_1", "m"};
  const auto events = parse_sse(anthropic_stream(sctx, deltas));
  std::string thinking, text, signature;
  std::vector<std::string> order;
  for (const auto &e : events) {
    if (e.name == "content_block_start")
      order.push_back(std::to_string(e.data["index"].get<int>()) + ":" +
                      e.data["content_block"]["type"].get<std::string>());
    if (e.name != "content_block_delta") continue;
    const json &d = e.data["delta"];
    if (d["type"] == "thinking_delta") {
      EXPECT_EQ(e.data["index"], 0);
      thinking += d["thinking"].get<std::string>();
    } else if (d["type"] == "signature_delta") {
      signature = d["signature"];
    } else if (d["type"] == "text_delta") {
      EXPECT_EQ(e.data["index"], 1);
      text += d["text"].get<std::string>();
    }
  }
  EXPECT_EQ(order, (std::vector<std::string>{"0:thinking", "1:text"}));
  EXPECT_EQ(thinking, "plan it");
  EXPECT_EQ(signature, anthropic::thinking_signature("plan it"));
  EXPECT_EQ(text, "answer");
  EXPECT_EQ(events.back().name, "message_stop");
}

TEST(AnthropicThinking, OmittedDisplayKeepsTheBlockWithoutItsText) {
  Fixture f(kScript);
  anthropic::RenderContext ctx{"msg_1", "m"};
  ctx.thinking_omitted = true;
  auto [deltas, body] = f.run(static_cast<int>(kScript.size()), [&](const Generation &g) {
    return anthropic::render_message(ctx, g);
  });
  const json j = json::parse(body);
  EXPECT_EQ(j["content"][0]["thinking"], "");
  EXPECT_EQ(j["content"][0]["signature"], anthropic::thinking_signature("plan it"));
  anthropic::RenderContext sctx{"msg_1", "m"};
  sctx.thinking_omitted = true;
  const std::string sse = anthropic_stream(sctx, deltas);
  EXPECT_EQ(sse.find("thinking_delta"), std::string::npos);
  EXPECT_NE(sse.find("signature_delta"), std::string::npos);
}

TEST(AnthropicThinking, APromptThatOpenedTheBlockStartsInsideIt) {
  const std::string script = "deep thought</think>42";
  Fixture f(script);
  anthropic::RenderContext ctx{"msg_1", "m"};
  ctx.opens_reasoning = true;
  auto [deltas, body] = f.run(static_cast<int>(script.size()), [&](const Generation &g) {
    return anthropic::render_message(ctx, g);
  });
  const json j = json::parse(body);
  EXPECT_EQ(j["content"][0]["thinking"], "deep thought");
  EXPECT_EQ(j["content"][1]["text"], "42");
}

TEST(AnthropicThinking, NoThinkBlockIsPlainText) {
  const std::string script = "just text";
  Fixture f(script);
  anthropic::RenderContext ctx{"msg_1", "m"};
  auto [deltas, body] = f.run(static_cast<int>(script.size()), [&](const Generation &g) {
    return anthropic::render_message(ctx, g);
  });
  const json j = json::parse(body);
  EXPECT_EQ(j["content"], json::array({{{"type", "text"}, {"text", "just text"}}}));
  anthropic::RenderContext sctx{"msg_1", "m"};
  const auto events = parse_sse(anthropic_stream(sctx, deltas));
  std::string text;
  for (const auto &e : events)
    if (e.name == "content_block_delta") text += e.data["delta"]["text"].get<std::string>();
  EXPECT_EQ(text, "just text");
}

TEST(OpenAIReasoning, ReasoningContentAndReasoningBesideTheAnswer) {
  Fixture f(kScript);
  openai::RenderContext ctx;
  ctx.id = "chatcmpl-1";
  openai::ChatRequest req;
  auto [deltas, body] = f.run(static_cast<int>(kScript.size()), [&](const Generation &g) {
    return openai::render_chat(ctx, req, g);
  });
  const json m = json::parse(body)["choices"][0]["message"];
  EXPECT_EQ(m["content"], "answer");
  EXPECT_EQ(m["reasoning_content"], "plan it");
  EXPECT_EQ(m["reasoning"], "plan it");

  openai::RenderContext sctx;
  sctx.id = "chatcmpl-1";
  std::string reasoning, reasoning_new, content;
  for (const auto &d : deltas)
    for (const auto &chunk : openai::chat_chunks(sctx, req, d)) {
      const json delta = json::parse(chunk)["choices"][0]["delta"];
      reasoning += delta.value("reasoning_content", "");
      reasoning_new += delta.value("reasoning", "");
      content += delta.value("content", "");
      // A chunk carries reasoning or content, never both.
      EXPECT_FALSE(delta.contains("reasoning_content") && delta.contains("content")) << chunk;
    }
  EXPECT_EQ(reasoning, "plan it");
  EXPECT_EQ(reasoning_new, "plan it");
  EXPECT_EQ(content, "answer");
}

TEST(OpenAIReasoning, NoThinkBlockHasNoReasoningField) {
  const std::string script = "<b>bold</b>";
  Fixture f(script);
  openai::RenderContext ctx;
  ctx.id = "chatcmpl-1";
  openai::ChatRequest req;
  auto [deltas, body] = f.run(static_cast<int>(script.size()), [&](const Generation &g) {
    return openai::render_chat(ctx, req, g);
  });
  const json m = json::parse(body)["choices"][0]["message"];
  EXPECT_EQ(m["content"], "<b>bold</b>");
  EXPECT_FALSE(m.contains("reasoning_content"));
}

TEST(OpenAIReasoning, TemplateKwargsFromTheRequest) {
  auto chat = [](json extra) {
    json b{{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    b.update(extra);
    return openai::parse_chat(b);
  };
  EXPECT_EQ(chat({{"reasoning_effort", "none"}}).template_kwargs,
            json({{"reasoning_effort", "none"}, {"enable_thinking", false}}));
  EXPECT_EQ(chat({{"reasoning_effort", "high"}}).template_kwargs["enable_thinking"], true);
  EXPECT_EQ(
      chat({{"chat_template_kwargs", {{"enable_thinking", false}}}, {"reasoning_effort", "high"}})
          .template_kwargs["enable_thinking"],
      false);
  EXPECT_EQ(chat(json::object()).template_kwargs, json::object());
  try {
    chat({{"chat_template_kwargs", "x"}});
    FAIL();
  } catch (const ApiErrorException &e) {
    EXPECT_EQ(e.error.param, "chat_template_kwargs");
  }
}

namespace {

anthropic::MessagesRequest messages(json extra) {
  json b{{"model", "m"},
         {"max_tokens", 32000},
         {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  b.update(extra);
  return anthropic::parse_messages(b);
}

std::string param_of(json extra) {
  try {
    messages(std::move(extra));
  } catch (const ApiErrorException &e) {
    return e.error.param;
  }
  return "<no error>";
}

}  // namespace

TEST(AnthropicClaudeCodeFields, SystemEntriesInMessagesMergeIntoTheSystemPrompt) {
  const auto r = messages({{"system", json::array({{{"type", "text"},
                                                    {"text", "A"},
                                                    {"cache_control", {{"type", "ephemeral"}}}}})},
                           {"messages", json::parse(R"([{"role": "user", "content": "hi"},
         {"role": "system", "content": "B"},
         {"role": "system", "content": [{"type": "text", "text": "C"}]},
         {"role": "assistant", "content": "yo"}])")}});
  ASSERT_EQ(r.messages.size(), 3u) << r.messages.dump();
  EXPECT_EQ(r.messages[0], json({{"role", "system"}, {"content", "A\n\nB\n\nC"}}));
  EXPECT_EQ(r.messages[1]["role"], "user");
  EXPECT_EQ(r.messages[2]["role"], "assistant");
  // Only system entries: no turn to answer.
  EXPECT_EQ(param_of({{"messages", json::parse(R"([{"role": "system", "content": "x"}])")}}),
            "messages");
  EXPECT_EQ(param_of({{"messages", json::parse(R"([{"role": "developer", "content": "x"}])")}}),
            "messages.0.role");
}

TEST(AnthropicClaudeCodeFields, ThinkingTypesAndTheirTemplateKwargs) {
  EXPECT_EQ(messages({{"thinking", {{"type", "adaptive"}, {"display", "omitted"}}}})
                .template_kwargs["enable_thinking"],
            true);
  EXPECT_TRUE(
      messages({{"thinking", {{"type", "adaptive"}, {"display", "omitted"}}}}).thinking_omitted);
  EXPECT_FALSE(
      messages({{"thinking", {{"type", "adaptive"}, {"display", "updates"}}}}).thinking_omitted);
  EXPECT_EQ(messages({{"thinking", {{"type", "disabled"}}}}).template_kwargs["enable_thinking"],
            false);
  EXPECT_EQ(messages(json::object()).template_kwargs["enable_thinking"], false);
  EXPECT_EQ(param_of({{"thinking", {{"type", "sometimes"}}}}), "thinking.type");
  EXPECT_EQ(param_of({{"thinking", "on"}}), "thinking");
  EXPECT_EQ(param_of({{"thinking", {{"type", "enabled"}}}}), "thinking.budget_tokens");
}

TEST(AnthropicClaudeCodeFields, ClaudeCodesOtherFieldsAreAccepted) {
  const auto r = messages(json::parse(R"({
    "metadata": {"user_id": "{\"device_id\":\"d\"}"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
    "tools": [{"name": "Bash", "input_schema": {"type": "object"}, "defer_loading": false,
               "cache_control": {"type": "ephemeral"}}],
    "thinking": {"type": "adaptive"}})"));
  EXPECT_EQ(r.effort, "high");
  EXPECT_EQ(r.tool_names, (std::vector<std::string>{"Bash"}));
  EXPECT_EQ(param_of({{"context_management", 3}}), "context_management");
  EXPECT_EQ(param_of({{"output_config", {{"effort", 3}}}}), "output_config.effort");
  EXPECT_EQ(param_of({{"output_config", {{"format", {{"type", "json_schema"}}}}}}),
            "output_config.format.schema");
  EXPECT_EQ(param_of({{"tools",
                       json::parse(R"([{"name": "f", "input_schema": {}, "defer_loading": 1}])")}}),
            "tools.0.defer_loading");
}

TEST(AnthropicClaudeCodeFields, ThinkingBlocksBelongInAssistantTurns) {
  EXPECT_EQ(param_of({{"messages", json::parse(R"([{"role": "user", "content": [
              {"type": "thinking", "thinking": "x", "signature": "s"}]}])")}}),
            "messages.0.content.0.type");
  EXPECT_EQ(param_of({{"messages", json::parse(R"([{"role": "user", "content": "q"},
              {"role": "assistant", "content": [{"type": "thinking", "signature": "s"}]}])")}}),
            "messages.1.content.0.thinking");
  const auto r = messages({{"messages", json::parse(R"([{"role": "user", "content": "q"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "redacted_thinking", "data": "zzz"}, {"type": "text", "text": "a"}]},
      {"role": "user", "content": "more"}])")}});
  EXPECT_EQ(r.messages[1]["reasoning_content"], "hm");
  EXPECT_EQ(r.messages[1]["content"], "a");
}

TEST(HarmonyReasoning, ChannelsBecomeThinkingAndTextBlocksStreamedByteByByte) {
  // A harmony vocabulary (ByteText with its markers as single tokens): the analysis
  // message is the thinking block, the final message the text, whatever the chunking.
  const std::string script =
      "<|channel|>analysis<|message|>plan it<|end|><|start|>assistant<|channel|>final"
      "<|message|>answer<|return|>";
  Fixture f(script);
  f.text.single = {"<|channel|>", "<|constrain|>"};
  anthropic::MessagesRequest req = messages(json::object());
  anthropic::RenderContext ctx{"msg_1", "m"};
  anthropic::prepare_tools(ctx, req, f.text);
  auto [deltas, body] = f.run(static_cast<int>(script.size()), [&](const Generation &g) {
    return anthropic::render_message(ctx, g);
  });
  const json j = json::parse(body);
  ASSERT_EQ(j["content"].size(), 2u) << body;
  EXPECT_EQ(j["content"][0]["thinking"], "plan it");
  EXPECT_EQ(j["content"][1], json({{"type", "text"}, {"text", "answer"}}));
  anthropic::RenderContext sctx{"msg_1", "m"};
  anthropic::prepare_tools(sctx, req, f.text);
  std::string thinking, text;
  for (const auto &e : parse_sse(anthropic_stream(sctx, deltas))) {
    if (e.name != "content_block_delta") continue;
    const json &d = e.data["delta"];
    if (d["type"] == "thinking_delta") thinking += d["thinking"].get<std::string>();
    if (d["type"] == "text_delta") text += d["text"].get<std::string>();
  }
  EXPECT_EQ(thinking, "plan it");
  EXPECT_EQ(text, "answer");
}

TEST(HarmonyReasoning, EffortForTheHarmonyPromptFromEachApi) {
  EXPECT_EQ(messages({{"output_config", {{"effort", "low"}}}}).template_kwargs["reasoning_effort"],
            "low");
  EXPECT_EQ(messages({{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}})
                .template_kwargs["reasoning_effort"],
            "low");
  EXPECT_EQ(messages({{"thinking", {{"type", "enabled"}, {"budget_tokens", 32000}}}})
                .template_kwargs["reasoning_effort"],
            "high");
  EXPECT_EQ(messages({{"thinking", {{"type", "enabled"}, {"budget_tokens", 4096}}}})
                .template_kwargs["reasoning_effort"],
            "medium");
  EXPECT_EQ(messages({{"thinking", {{"type", "disabled"}}}}).template_kwargs["reasoning_effort"],
            "low");
  EXPECT_FALSE(messages(json::object()).template_kwargs.contains("reasoning_effort"));
}
