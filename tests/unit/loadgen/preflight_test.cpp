#include "loadgen/preflight.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "scripted_server.h"

namespace keel::loadgen {
namespace {

using testing::ScriptedServer;

std::string json_response(int status, const std::string &body) {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

TEST(Preflight, ChooseModel) {
  EXPECT_EQ(choose_model({"a", "b"}, "", "s"), "a");
  EXPECT_EQ(choose_model({"a", "b"}, "b", "s"), "b");
  EXPECT_EQ(choose_model({}, "x", "s"), "x");  // a server without /v1/models
  EXPECT_THROW(choose_model({}, "", "s"), Error);
  try {
    choose_model({"a", "b"}, "c", "host:1");
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_STREQ(e.what(), "model 'c' is not served at host:1 (it serves: a, b)");
  }
}

TEST(Preflight, ServedModelsAndKeys) {
  ScriptedServer server([](const std::string &req) {
    if (req.find("Authorization: Bearer good") == std::string::npos)
      return json_response(401, R"({"error":{"message":"bad key"}})");
    return json_response(200, R"({"object":"list","data":[{"id":"m1"},{"id":"m2"}]})");
  });
  const Endpoint ep = parse_base_url(server.url());
  EXPECT_EQ(served_models(ep, "good"), (std::vector<std::string>{"m1", "m2"}));
  try {
    served_models(ep, "bad");
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("refused the API key (HTTP 401): bad key"),
              std::string::npos)
        << e.what();
  }
}

TEST(Preflight, NoModelsEndpointIsAnEmptyList) {
  ScriptedServer server([](const std::string &) { return json_response(404, "{}"); });
  EXPECT_TRUE(served_models(parse_base_url(server.url()), "").empty());
}

TEST(Preflight, TokenPromptsOnlyWhereTheServerTakesThem) {
  // A server that takes token ids below 1000 only.
  ScriptedServer server([](const std::string &req) {
    EXPECT_NE(req.find("POST /v1/completions"), std::string::npos);
    const bool small = req.find("\"prompt\":[100,999]") != std::string::npos;
    return small ? json_response(200, R"({"choices":[{"text":"x"}]})")
                 : json_response(400, R"({"error":{"message":"token id out of range"}})");
  });
  const Endpoint ep = parse_base_url(server.url());
  EXPECT_TRUE(takes_token_prompts(ep, "", "m", 100, 999));
  EXPECT_FALSE(takes_token_prompts(ep, "", "m", 100, 4095));
}

TEST(Preflight, AModelThatCannotServeStopsTheRun) {
  ScriptedServer server([](const std::string &) {
    return json_response(503, R"({"error":{"message":"model 'm' failed to load"}})");
  });
  try {
    takes_token_prompts(parse_base_url(server.url()), "", "m", 1, 2);
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("cannot serve (HTTP 503): model 'm' failed to load"),
              std::string::npos)
        << e.what();
  }
}

TEST(Preflight, UnreachableIsUnavailable) {
  std::string url;
  {
    ScriptedServer gone([](const std::string &) { return std::string(); });
    url = gone.url();
  }
  try {
    served_models(parse_base_url(url), "");
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("cannot reach 127.0.0.1:"), std::string::npos);
  }
}

}  // namespace
}  // namespace keel::loadgen
