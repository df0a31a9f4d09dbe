// Request parsing and response rendering for the OpenAI and Anthropic formats, driven
// through a real Generation over a scripted in-process engine.
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

std::string param_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const ApiErrorException &e) {
    return e.error.param;
  }
  return "<no error>";
}

struct Fixture {
  test::ByteText text;
  test::ScriptEngine engine{"hello world STOP tail"};
  std::atomic<std::uint64_t> ids{1};

  ModelLease lease() {
    auto m = std::make_shared<LoadedModel>();
    m->id = "m";
    m->engine = &engine;
    m->text = &text;
    m->info.context_length = 64;
    return ModelLease(m, nullptr);
  }

  // Runs a generation to the end; returns the deltas seen and the rendered result.
  template <typename Render>
  std::pair<std::vector<ChoiceDelta>, std::string> run(GenerationSpec spec, Render render) {
    auto deltas = std::make_shared<std::vector<ChoiceDelta>>();
    std::promise<std::string> done;
    auto g = Generation::start(
        lease(), std::move(spec), ids, [deltas](const ChoiceDelta &d) { deltas->push_back(d); },
        [&](const Generation &gen) { done.set_value(render(gen)); });
    auto fut = done.get_future();
    EXPECT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    return {*deltas, fut.get()};
  }
};

}  // namespace

TEST(OpenAIParse, ChatValidationNamesTheField) {
  auto chat = [](json extra) {
    json b{{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    b.update(extra);
    return openai::parse_chat(b);
  };
  EXPECT_EQ(param_of([&] { chat({{"max_tokens", "x"}}); }), "max_tokens");
  EXPECT_EQ(param_of([&] { chat({{"max_tokens", 0}}); }), "max_tokens");
  EXPECT_EQ(param_of([&] { chat({{"temperature", 3}}); }), "temperature");
  EXPECT_EQ(param_of([&] { chat({{"n", 0}}); }), "n");
  EXPECT_EQ(param_of([&] { chat({{"messages", json::array()}}); }), "messages");
  EXPECT_EQ(param_of([&] {
              chat({{"messages", json::array({{{"role", 3}}})}});
            }),
            "messages[0].role");
  EXPECT_EQ(param_of([&] {
              chat({{"stream_options", {{"include_usage", true}}}});
            }),
            "stream_options");
  EXPECT_EQ(param_of([&] { chat({{"top_logprobs", 2}}); }), "top_logprobs");
  EXPECT_EQ(param_of([&] { chat({{"stop", json::array({1})}}); }), "stop");
  EXPECT_EQ(param_of([&] { openai::parse_chat(json{{"messages", json::array()}}); }), "model");
  auto ok =
      chat({{"max_completion_tokens", 7},
            {"stop", "x"},
            {"logprobs", true},
            {"top_logprobs", 2},
            {"seed", 9},
            {"messages",
             json::array({{{"role", "user"},
                           {"content", json::array({{{"type", "text"}, {"text", "a"}},
                                                    {{"type", "text"}, {"text", "b"}}})}}})}});
  EXPECT_EQ(ok.max_tokens, 7);
  EXPECT_EQ(ok.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(ok.sampling.logprobs, 2);
  EXPECT_EQ(ok.sampling.seed, 9u);
  EXPECT_EQ(ok.messages[0]["content"], "ab");
}

TEST(OpenAIParse, CompletionPromptShapes) {
  auto c = [](json prompt) {
    return openai::parse_completion(json{{"model", "m"}, {"prompt", prompt}});
  };
  EXPECT_EQ(c("abc").text_prompts.size(), 1u);
  EXPECT_EQ(c(json::array({"a", "b"})).text_prompts.size(), 2u);
  auto ids = c(json::array({1, 2, 3}));
  ASSERT_TRUE(ids.prompt_is_tokens);
  EXPECT_EQ(ids.token_prompts[0], (std::vector<TokenId>{1, 2, 3}));
  EXPECT_EQ(c(json::array({json::array({1}), json::array({2, 3})})).token_prompts.size(), 2u);
  EXPECT_EQ(c(json::array({1, 2, 3})).max_tokens, 16);  // OpenAI's default
  EXPECT_EQ(param_of([&] { c(json::array({1, "a"})); }), "prompt");
  EXPECT_EQ(param_of([&] { c(json::array({-1})); }), "prompt");
  EXPECT_EQ(param_of([&] { c(json::array()); }), "prompt");
  EXPECT_EQ(param_of([&] { c(5); }), "prompt");
}

TEST(AnthropicParse, RequiresMaxTokensAndAlternatingRoles) {
  json ok{{"model", "m"},
          {"max_tokens", 5},
          {"system", json::array({{{"type", "text"}, {"text", "be brief"}}})},
          {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  auto r = anthropic::parse_messages(ok);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[0]["content"], "be brief");
  json no_max = ok;
  no_max.erase("max_tokens");
  EXPECT_EQ(param_of([&] { anthropic::parse_messages(no_max); }), "max_tokens");
  EXPECT_NO_THROW(anthropic::parse_messages(no_max, true));  // count_tokens
  json bad_role = ok;
  bad_role["messages"][0]["role"] = "developer";  // system entries are merged (Claude Code)
  EXPECT_EQ(param_of([&] { anthropic::parse_messages(bad_role); }), "messages.0.role");
  json hot = ok;
  hot["temperature"] = 1.5;  // Anthropic's range is [0, 1]
  EXPECT_EQ(param_of([&] { anthropic::parse_messages(hot); }), "temperature");
}

TEST(Generation, ChatRenderingAndStopStrings) {
  Fixture f;
  openai::ChatRequest req;
  req.logprobs = true;
  openai::RenderContext ctx{"chatcmpl-1", 123, "m", &f.text};
  GenerationSpec spec;
  spec.prompts = {{'h', 'i'}};
  spec.sampling.max_tokens = 40;
  spec.sampling.logprobs = 0;
  spec.stop = {"STOP"};
  auto [deltas, body] =
      f.run(spec, [&](const Generation &g) { return openai::render_chat(ctx, req, g); });
  auto j = json::parse(body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hello world ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_FALSE(j["choices"][0]["logprobs"]["content"].empty());
  std::string streamed;
  for (const auto &d : deltas) streamed += d.text;
  EXPECT_EQ(streamed, "hello world ");
  EXPECT_EQ(deltas.back().finish, FinishReason::kStop);
}

TEST(Generation, CompletionsWithNChoicesAndLengthFinish) {
  Fixture f;
  openai::CompletionRequest req;
  req.echo = true;
  openai::RenderContext ctx{"cmpl-1", 1, "m", &f.text};
  GenerationSpec spec;
  spec.prompts = {{'a', 'b'}};
  spec.n = 2;
  spec.sampling.max_tokens = 5;
  auto [deltas, body] = f.run(
      spec, [&](const Generation &g) { return openai::render_completion(ctx, req, g, {"ab"}); });
  auto j = json::parse(body);
  ASSERT_EQ(j["choices"].size(), 2u);
  for (const auto &c : j["choices"]) {
    EXPECT_EQ(c["text"], "abhello");  // echo + 5 tokens
    EXPECT_EQ(c["finish_reason"], "length");
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], 10);
}

TEST(Generation, AnthropicMessageAndStreamEvents) {
  Fixture f;
  anthropic::RenderContext ctx{"msg_1", "m"};
  GenerationSpec spec;
  spec.prompts = {{'q'}};
  spec.sampling.max_tokens = 30;
  spec.stop = {"world"};
  auto [deltas, body] =
      f.run(spec, [&](const Generation &g) { return anthropic::render_message(ctx, g); });
  auto j = json::parse(body);
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["content"][0]["text"], "hello ");
  EXPECT_EQ(j["stop_reason"], "stop_sequence");
  EXPECT_EQ(j["stop_sequence"], "world");
  EXPECT_EQ(j["usage"]["input_tokens"], 1);
  const std::string start = anthropic::stream_start(ctx, 1, 0, 0);
  EXPECT_EQ(start.rfind("event: message_start\n", 0), 0u);
  // The prompt splits into uncached, cache-written and cache-read tokens.
  const std::string split = anthropic::stream_start(ctx, 40, 16, 8);
  const auto data = split.find("data: ") + 6;
  const json usage =
      json::parse(split.substr(data, split.find('\n', data) - data))["message"]["usage"];
  EXPECT_EQ(usage["input_tokens"], 16);
  EXPECT_EQ(usage["cache_read_input_tokens"], 16);
  EXPECT_EQ(usage["cache_creation_input_tokens"], 8);
  // Blocks open as content arrives (the first may be thinking or a tool call).
  EXPECT_EQ(start.find("event: content_block_start"), std::string::npos);
  anthropic::RenderContext sctx{"msg_1", "m"};
  std::string streamed;
  for (const auto &d : deltas) streamed += anthropic::stream_delta(sctx, d.text);
  EXPECT_NE(streamed.find("event: content_block_start"), std::string::npos);
  EXPECT_NE(streamed.find("\"type\":\"text_delta\""), std::string::npos) << streamed;
  const std::string fin = anthropic::stream_finish(sctx, deltas.back(), 3);
  EXPECT_NE(fin.find("\"stop_reason\":\"stop_sequence\""), std::string::npos);
  const std::string tail = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  ASSERT_GE(fin.size(), tail.size());
  EXPECT_EQ(fin.substr(fin.size() - tail.size()), tail);
}

TEST(Generation, AbortEndsEveryChoice) {
  Fixture f;
  GenerationSpec spec;
  spec.prompts = {{'x'}};
  spec.n = 3;
  spec.sampling.max_tokens = 1000000;
  std::promise<std::vector<FinishReason>> done;
  auto g = Generation::start(f.lease(), spec, f.ids, nullptr, [&](const Generation &gen) {
    std::vector<FinishReason> fin;
    for (const auto &r : gen.results()) fin.push_back(r.finish);
    done.set_value(fin);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  g->abort();
  auto fut = done.get_future();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(fut.get(), (std::vector<FinishReason>(3, FinishReason::kAbort)));
}

TEST(ApiErrors, RenderInEachFormat) {
  ApiError e{413, "too big", "body"};
  auto o = json::parse(render_openai_error(e));
  EXPECT_EQ(o["error"]["param"], "body");
  EXPECT_EQ(o["error"]["message"], "too big");
  auto a = json::parse(render_anthropic_error(e));
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "request_too_large");
  EXPECT_EQ(api_error_from(Error(ErrorCode::kResourceExhausted, "x")).status, 507);
  EXPECT_EQ(api_error_from(Error(ErrorCode::kNotFound, "x")).status, 404);
  EXPECT_EQ(api_error_from(Error(ErrorCode::kUnavailable, "x")).status, 503);
}
