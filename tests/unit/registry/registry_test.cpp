// Model registry pieces that need no engine process: sizes, ids, discovery, and the
// errors for unknown models and models that cannot fit.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "registry/model_registry.h"

using namespace keel;
namespace fs = std::filesystem;

TEST(ParseSize, UnitsAndErrors) {
  EXPECT_EQ(parse_size("0", "x"), 0);
  EXPECT_EQ(parse_size("1000", "x"), 1000);
  EXPECT_EQ(parse_size("512M", "x"), 512ll << 20);
  EXPECT_EQ(parse_size("8G", "x"), 8ll << 30);
  EXPECT_EQ(parse_size("1.5GiB", "x"), 3ll << 29);
  EXPECT_EQ(parse_size("2k", "x"), 2048);
  EXPECT_THROW(parse_size("lots", "--memory-budget"), Error);
  EXPECT_THROW(parse_size("5Q", "x"), Error);
  EXPECT_THROW(parse_size("-1G", "x"), Error);
}

namespace {
struct TempModels {
  fs::path dir = fs::temp_directory_path() / ("keel-registry-test-" + std::to_string(::getpid()));
  TempModels() {
    fs::create_directories(dir / "alpha");
    std::ofstream(dir / "alpha" / "config.json") << "{}";
    std::ofstream(dir / "alpha" / "model.safetensors") << std::string(4096, 'w');
    std::ofstream(dir / "beta.gguf") << std::string(100, 'g');
    fs::create_directories(dir / "not-a-model");
    std::ofstream(dir / "notes.txt") << "x";
  }
  ~TempModels() { fs::remove_all(dir); }
};
}  // namespace

TEST(ModelRegistry, DiscoversDirectoriesAndGgufStems) {
  TempModels t;
  RegistryOptions o;
  ModelRegistry reg(o);
  reg.discover(t.dir);
  EXPECT_EQ(reg.ids(), (std::vector<std::string>{"alpha", "beta"}));
  EXPECT_EQ(reg.add_model(t.dir / "alpha/"), "alpha");  // trailing slash: same id
  EXPECT_THROW(reg.add_model(t.dir / "missing"), Error);
  EXPECT_THROW(reg.discover(t.dir / "notes.txt"), Error);
  for (const auto &r : reg.report()) {
    EXPECT_EQ(r.state, ModelState::kAvailable);
    EXPECT_GT(r.memory_bytes, 0);  // the weight files' size, before any load
  }
}

TEST(ModelRegistry, UnknownModelIsNotFound) {
  const RegistryOptions o;
  ModelRegistry reg(o);
  try {
    reg.acquire("nope", std::chrono::steady_clock::now() + std::chrono::seconds(1));
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

TEST(ModelRegistry, AModelOverTheWholeBudgetIsRefusedWith507Semantics) {
  TempModels t;
  RegistryOptions o;
  o.memory_budget_bytes = 1024;  // alpha's weights alone are 4 KiB
  ModelRegistry reg(o);
  reg.discover(t.dir);
  try {
    reg.acquire("alpha", std::chrono::steady_clock::now() + std::chrono::seconds(1));
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("alpha"), std::string::npos);
  }
  EXPECT_EQ(reg.memory_in_use(), 0);
}

TEST(ModelRegistry, StepDeadlineIsFixedOrTheFloorBeforeAnyStep) {
  TempModels t;
  RegistryOptions scaled;
  scaled.step_deadline = std::chrono::milliseconds(0);
  scaled.step_deadline_floor = std::chrono::milliseconds(7000);
  ModelRegistry a(scaled);
  a.discover(t.dir);
  for (const auto &r : a.report()) EXPECT_DOUBLE_EQ(r.step_deadline_seconds, 7.0);
  RegistryOptions fixed;
  fixed.step_deadline = std::chrono::milliseconds(2500);
  ModelRegistry b(fixed);
  b.discover(t.dir);
  for (const auto &r : b.report()) EXPECT_DOUBLE_EQ(r.step_deadline_seconds, 2.5);
}

TEST(ModelRegistry, PerModelPinAndIdleTtl) {
  TempModels t;
  RegistryOptions o;
  o.idle_ttl = std::chrono::milliseconds(60'000);
  ModelRegistry reg(o);
  reg.discover(t.dir);
  ModelSettings s;
  s.idle_ttl = std::chrono::milliseconds(5'000);
  reg.configure("alpha", s);
  ModelSettings pin;
  pin.pinned = true;
  reg.configure("beta", pin);
  EXPECT_THROW(reg.configure("gamma", s), Error);
  for (const auto &r : reg.report()) {
    if (r.id == "alpha") {
      EXPECT_EQ(r.idle_ttl.count(), 5000);
      EXPECT_FALSE(r.pinned);
    } else {
      EXPECT_EQ(r.idle_ttl.count(), 60000);  // the server's default
      EXPECT_TRUE(r.pinned);
    }
  }
  // Nothing is loaded: no lease to take, and no engine to count.
  EXPECT_FALSE(reg.try_lease("alpha").has_value());
  EXPECT_TRUE(reg.ready_leases().empty());
  EXPECT_EQ(reg.requests_in_flight(), 0u);
}
