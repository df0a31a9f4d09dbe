// Eviction under a memory budget with real `keel engine` children: a load that needs a
// busy model's room waits (RegistryOptions::eviction_wait) for its last request to end,
// then evicts it; past the wait it is refused (507), never left hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/error.h"
#include "registry/model_registry.h"
#include "support/paths.h"

using namespace keel;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
// Two ids ("a", "b") for one tiny model: the fixture's weights with the default
// model's tokenizer files (the registry loads a tokenizer with every model).
struct TwoModels {
  fs::path dir = fs::temp_directory_path() / ("keel-eviction-test-" + std::to_string(::getpid()));
  fs::path weights = test::fixtures_dir() / "models" / "llama_linear_mha_f32";
  fs::path tokenizer = test::source_dir() / "models" / "default";
  TwoModels() {
    for (const char *id : {"a", "b"}) {
      fs::create_directories(dir / id);
      for (const char *f : {"config.json", "model.safetensors"})
        fs::copy_file(weights / f, dir / id / f);
      for (const char *f : {"tokenizer.json", "tokenizer_config.json"})
        fs::copy_file(tokenizer / f, dir / id / f);
    }
  }
  ~TwoModels() { fs::remove_all(dir); }
  // Room for one loaded model (weights + 16 KV blocks of f32) and a half.
  std::int64_t budget() const {
    const auto cfg = nlohmann::json::parse(std::ifstream(weights / "config.json"));
    const std::int64_t kv = 16LL * 16 * cfg["num_hidden_layers"].get<int>() * 2 *
                            cfg["num_key_value_heads"].get<int>() * cfg["head_dim"].get<int>() * 4;
    return (fs::file_size(weights / "model.safetensors") + kv) * 3 / 2;
  }
};
}  // namespace

TEST(ModelRegistryEviction, ALoadWaitsForABusyModelThenEvictsItOrIsRefused) {
  TwoModels m;
  ASSERT_TRUE(fs::exists(test::keel_binary())) << test::keel_binary();
  RegistryOptions o;
  o.keel_executable = test::keel_binary();
  o.plan.kv.blocks = 16;
  o.memory_budget_bytes = m.budget();
  o.eviction_wait = std::chrono::milliseconds(1500);
  ModelRegistry reg(o);
  reg.add_model(m.dir / "a");
  reg.add_model(m.dir / "b");
  const auto deadline = Clock::now() + std::chrono::seconds(60);

  // a is busy (leased) when b asks for its room; its lease ends 300 ms later.
  std::optional<ModelLease> a = reg.acquire("a", deadline);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    a.reset();
  });
  const auto t0 = Clock::now();
  std::optional<ModelLease> b;
  EXPECT_NO_THROW(b = reg.acquire("b", deadline));
  release.join();
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(250)) << "b did not wait for a";
  for (const auto &r : reg.report())
    EXPECT_EQ(r.state, r.id == "b" ? ModelState::kReady : ModelState::kAvailable) << r.id;

  // b stays busy past the wait: a is refused with 507 semantics, after the wait.
  const auto t1 = Clock::now();
  try {
    reg.acquire("a", deadline);
    ADD_FAILURE() << "a was loaded beside a busy b over the budget";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
  }
  const auto waited = Clock::now() - t1;
  EXPECT_GE(waited, std::chrono::milliseconds(1400));
  EXPECT_LT(waited, std::chrono::seconds(10));
  EXPECT_LE(reg.memory_in_use(), o.memory_budget_bytes);
}
