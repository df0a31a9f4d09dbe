// An engine that refuses its load for memory (its plan: "insufficient memory: ...", as
// `keel engine` sends it when its device share is not free) is answered with 507
// (kResourceExhausted), any other load error with 503 (kUnavailable). The engine is a
// stand-in script that speaks the frame format: [u32 LE length][u8 type][payload].
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "core/error.h"
#include "kv/kv_sizing.h"
#include "registry/model_registry.h"
#include "support/paths.h"

using namespace keel;
namespace fs = std::filesystem;

namespace {
struct RefusingEngine {
  fs::path dir = fs::temp_directory_path() / ("keel-registry-memory-" + std::to_string(::getpid()));
  fs::path script = dir / "fake-keel";
  fs::path model = dir / "m";
  explicit RefusingEngine(const std::string &error) {
    fs::create_directories(model);
    const fs::path weights = test::fixtures_dir() / "models" / "llama_gqa_f32";
    const fs::path tokenizer = test::source_dir() / "models" / "default";
    for (const char *f : {"config.json", "model.safetensors"})
      fs::copy_file(weights / f, model / f);
    for (const char *f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(tokenizer / f, model / f);
    // A kLoadError frame (type 2) on fd 3, then exit 1: what `keel engine` does.
    std::ofstream(script) << "#!/bin/sh\nmsg='" << error << "'\nn=${#msg}\n"
                          << "printf \"$(printf '\\\\%03o\\\\%03o\\\\000\\\\000\\\\002' "
                             "$((n % 256)) $((n / 256)))%s\" \"$msg\" >&3\nexit 1\n";
    ::chmod(script.c_str(), 0755);
  }
  ~RefusingEngine() { fs::remove_all(dir); }

  Error acquire_error() {
    RegistryOptions o;
    o.keel_executable = script;
    ModelRegistry reg(o);
    reg.add_model(model);
    try {
      reg.acquire("m", std::chrono::steady_clock::now() + std::chrono::seconds(20));
    } catch (const Error &e) {
      return e;
    }
    return Error(ErrorCode::kInternal, "the load did not fail");
  }
};
}  // namespace

TEST(RegistryMemory, AnEngineRefusedForMemoryIs507WithItsFigures) {
  const std::string why =
      std::string("m: ") + kMemoryRefusalTag +
      "needs its share of the device, 0.3 x 140.00 GiB, but only 14.00 GiB is free";
  RefusingEngine fake(why);
  const Error e = fake.acquire_error();
  EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
  EXPECT_NE(std::string(e.what()).find("needs its share of the device"), std::string::npos)
      << e.what();
}

TEST(RegistryMemory, AnyOtherLoadErrorIs503) {
  RefusingEngine fake("m: config.json: bad field");
  const Error e = fake.acquire_error();
  EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
  EXPECT_NE(std::string(e.what()).find("bad field"), std::string::npos) << e.what();
}
