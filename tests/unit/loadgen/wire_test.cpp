// The stream side of the client: SSE framing split anywhere, what chunks tell, URLs.
#include <gtest/gtest.h>

#include "core/error.h"
#include "loadgen/endpoint.h"
#include "loadgen/openai_wire.h"
#include "loadgen/sse_parser.h"

namespace keel::loadgen {
namespace {

const std::string kStream =
    ": keepalive\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\" hello\"}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"\"}]}\r\n\r\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\" world\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,"
    "\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n"
    "data: [DONE]\n\n";

TEST(SseParser, SameEventsForAnySplit) {
  std::vector<std::string> whole;
  SseParser p;
  p.feed(kStream, [&](std::string_view d) { whole.emplace_back(d); });
  ASSERT_EQ(whole.size(), 5u);
  EXPECT_EQ(whole.back(), "[DONE]");
  for (std::size_t step : {1u, 2u, 3u, 7u, 13u}) {
    std::vector<std::string> got;
    SseParser q;
    for (std::size_t i = 0; i < kStream.size(); i += step)
      q.feed(std::string_view(kStream).substr(i, step),
             [&](std::string_view d) { got.emplace_back(d); });
    EXPECT_EQ(got, whole) << "step " << step;
  }
}

TEST(SseParser, JoinsMultiLineDataAndSkipsOtherFields) {
  std::vector<std::string> got;
  SseParser p;
  p.feed("event: x\nid: 3\ndata: a\ndata:b\n\ndata: c\n",
         [&](std::string_view d) { got.emplace_back(d); });
  ASSERT_EQ(got.size(), 1u);  // "c" waits for its blank line
  EXPECT_EQ(got[0], "a\nb");
}

TEST(OpenAiWire, TokensComeFromUsageNotFromEvents) {
  StreamState st;
  int firsts = 0;
  SseParser p;
  p.feed(kStream, [&](std::string_view d) { firsts += apply_event(d, st) ? 1 : 0; });
  EXPECT_EQ(firsts, 1);
  EXPECT_EQ(st.content_events, 2);  // the empty-text chunk is not content
  EXPECT_EQ(st.completion_tokens, 7);
  EXPECT_EQ(st.prompt_tokens, 12);
  EXPECT_EQ(st.cached_tokens, 8);
  EXPECT_EQ(st.reply, " hello world");
  EXPECT_TRUE(st.saw_done);
  EXPECT_TRUE(st.error.empty());
}

TEST(OpenAiWire, ChatDeltasAndErrors) {
  StreamState st;
  EXPECT_FALSE(apply_event(R"({"choices":[{"delta":{"role":"assistant"}}]})", st));
  EXPECT_TRUE(apply_event(R"({"choices":[{"delta":{"reasoning_content":"hm"}}]})", st));
  EXPECT_FALSE(apply_event(R"({"choices":[{"delta":{"content":"ok"}}]})", st));
  EXPECT_EQ(st.reply, "ok");
  EXPECT_EQ(st.completion_tokens, -1);
  apply_event(R"({"error":{"message":"engine died"}})", st);
  EXPECT_EQ(st.error, "engine died");
  StreamState bad;
  apply_event("{not json", bad);
  EXPECT_FALSE(bad.error.empty());
  EXPECT_EQ(error_message(R"({"error":{"message":"no such model"}})"), "no such model");
  EXPECT_EQ(error_message("plain text"), "plain text");
}

TEST(Endpoint, ParsesBaseUrls) {
  Endpoint e = parse_base_url("http://127.0.0.1:8000");
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, "8000");
  EXPECT_EQ(e.path("/v1/models"), "/v1/models");
  e = parse_base_url("http://example.test/proxy/v1/");
  EXPECT_EQ(e.port, "80");
  EXPECT_EQ(e.path("/v1/completions"), "/proxy/v1/completions");
  e = parse_base_url("http://[::1]:9000/v1");
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, "9000");
  EXPECT_EQ(e.base_path, "");
  for (const char *bad : {"127.0.0.1:8000", "https://x", "http://", "http://h:0", "http://h:99999",
                          "http://h:12a", "ftp://h"})
    EXPECT_THROW(parse_base_url(bad), Error) << bad;
}

}  // namespace
}  // namespace keel::loadgen
