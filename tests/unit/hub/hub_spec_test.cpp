#include "hub/hub_spec.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace keel::hub {
namespace {

TEST(HubSpec, RepositoryRevisionAndFile) {
  auto s = parse_repo_spec("Qwen/Qwen3-0.6B");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->repo, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(s->revision, "main");
  EXPECT_EQ(s->file, "");
  s = parse_repo_spec("org/name:v1.2");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->revision, "v1.2");
  s = parse_repo_spec("bartowski/Llama-GGUF:abc123/sub/model-Q4_K_M.gguf");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->repo, "bartowski/Llama-GGUF");
  EXPECT_EQ(s->revision, "abc123");
  EXPECT_EQ(s->file, "sub/model-Q4_K_M.gguf");
  s = parse_repo_spec("org/name/model.gguf");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->revision, "main");
  EXPECT_EQ(s->file, "model.gguf");
}

TEST(HubSpec, PathsAreNotRepositories) {
  EXPECT_FALSE(parse_repo_spec("model.gguf"));
  EXPECT_FALSE(parse_repo_spec("/abs/path"));
  EXPECT_FALSE(parse_repo_spec("./models/x"));
  EXPECT_FALSE(parse_repo_spec("../x/y"));
  EXPECT_FALSE(parse_repo_spec("a b/c"));
  EXPECT_FALSE(parse_repo_spec("org/.hidden"));
}

TEST(HubSpec, BadPartsAreErrorsNamingThem) {
  EXPECT_THROW(parse_repo_spec("org/name:../x"), Error);
  EXPECT_THROW(parse_repo_spec("org/name:"), Error);
  // "." would name the refs folder itself (keel pull org/name:. left refs/..tmp behind);
  // git refuses a ref part that starts with '.' or ends with ".lock".
  EXPECT_THROW(parse_repo_spec("org/name:."), Error);
  EXPECT_THROW(parse_repo_spec("org/name:.hidden"), Error);
  EXPECT_THROW(parse_repo_spec("org/name:v1.lock"), Error);
  EXPECT_EQ(parse_repo_spec("org/name:v1.2")->revision, "v1.2");
  EXPECT_THROW(parse_repo_spec("org/name/../../etc/passwd"), Error);
  EXPECT_THROW(parse_repo_spec("org/name//x"), Error);
  try {
    parse_repo_spec("org/name/a/../b");
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("not a plain relative path"), std::string::npos);
  }
}

TEST(HubSpec, SafeRelativePaths) {
  EXPECT_TRUE(is_safe_relative_path("model.safetensors"));
  EXPECT_TRUE(is_safe_relative_path("sub/dir/file.gguf"));
  EXPECT_FALSE(is_safe_relative_path(""));
  EXPECT_FALSE(is_safe_relative_path("/etc/passwd"));
  EXPECT_FALSE(is_safe_relative_path("../x"));
  EXPECT_FALSE(is_safe_relative_path("a/../../x"));
  EXPECT_FALSE(is_safe_relative_path("a/./x"));
  EXPECT_FALSE(is_safe_relative_path("a//x"));
  EXPECT_FALSE(is_safe_relative_path("a\\..\\x"));
  EXPECT_FALSE(is_safe_relative_path("a/"));
  EXPECT_EQ(repo_folder("org/name"), "org--name");
}

}  // namespace
}  // namespace keel::hub
