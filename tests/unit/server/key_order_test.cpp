// Chat templates print tool schemas with tojson; HF renders them in the client's key
// order, so the server must not reorder request JSON on the way to the template.
#include <gtest/gtest.h>

#include "server/anthropic/anthropic_types.h"
#include "server/json_fields.h"
#include "server/openai/openai_types.h"

namespace keel::server {
namespace {

constexpr const char *kTools =
    R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",)"
    R"("properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},"required":["zeta"]}}}])";

TEST(RequestJson, OpenAiToolSchemaKeepsClientKeyOrder) {
  const auto body = parse_body(
      std::string(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":)") + kTools +
      "}");
  const auto req = openai::parse_chat(body);
  const std::string dumped = req.tools.dump();
  ASSERT_NE(dumped.find("zeta"), std::string::npos);
  EXPECT_LT(dumped.find("zeta"), dumped.find("alpha")) << dumped;
  EXPECT_LT(dumped.find("\"type\""), dumped.find("\"function\"")) << dumped;
}

TEST(RequestJson, AnthropicToolSchemaKeepsClientKeyOrder) {
  const auto body =
      parse_body(R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}],)"
                 R"("tools":[{"name":"f","input_schema":{"type":"object","properties":)"
                 R"({"zeta":{"type":"string"},"alpha":{"type":"integer"}}}}]})");
  const auto req = anthropic::parse_messages(body);
  const std::string dumped = req.tools.dump();
  ASSERT_NE(dumped.find("zeta"), std::string::npos);
  EXPECT_LT(dumped.find("zeta"), dumped.find("alpha")) << dumped;
}

}  // namespace
}  // namespace keel::server
