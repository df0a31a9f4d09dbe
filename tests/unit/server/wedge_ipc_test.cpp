// Fault injection, cache clearing and honest counts across the engine IPC, and the
// validation of POST /debug/faults bodies.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>

#include "core/error.h"
#include "engine/ipc/client.h"
#include "engine/ipc/frame.h"
#include "engine/ipc/messages.h"
#include "engine/ipc/server.h"
#include "server/api_server.h"
#include "server/json_fields.h"
#include "unit/server/fakes.h"

using namespace keel;
using namespace std::chrono_literals;

namespace {

struct SocketPair {
  int front = -1, child = -1;
  SocketPair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    front = sv[0];
    child = sv[1];
  }
};

// A scripted engine that also keeps faults and counts cache clears, as Engine does.
class FaultyEngine final : public EngineApi {
 public:
  void submit(GenerationRequest r, EventSink sink) override { inner_.submit(std::move(r), sink); }
  void abort(RequestId id) override { inner_.abort(id); }
  EngineStatus status() const override { return inner_.status(); }
  void clear_cache() override { clears++; }
  void inject_fault(const FaultSpec &spec) override { faults.arm(spec); }
  std::vector<FaultSpec> armed_faults() const override { return faults.armed(); }

  FaultInjector faults;
  std::atomic<int> clears{0};

 private:
  test::ScriptEngine inner_{"ab", 2ms};
};

template <typename F>
bool eventually(F f, std::chrono::milliseconds within = 3s) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    if (f()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return f();
}

}  // namespace

TEST(IpcFaults, SpecRoundTripAndBadKind) {
  FaultSpec s;
  s.kind = FaultKind::kSlowStore;
  s.seconds = 0.25;
  s.count = 3;
  auto back = ipc::decode_fault(ipc::encode_fault(s));
  EXPECT_EQ(back.kind, FaultKind::kSlowStore);
  ASSERT_TRUE(back.seconds);
  EXPECT_DOUBLE_EQ(*back.seconds, 0.25);
  EXPECT_EQ(back.count, 3);
  FaultSpec forever;  // stall-step without seconds: forever
  auto list = ipc::decode_faults(ipc::encode_faults({s, forever}));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_FALSE(list[1].seconds.has_value());
  EXPECT_THROW(ipc::decode_fault(R"({"kind":"melt","count":1})"), keel::Error);
  EXPECT_THROW(ipc::decode_faults("{"), keel::Error);
}

TEST(IpcFaults, ArmListDisarmAndClearCacheReachTheChild) {
  SocketPair p;
  FaultyEngine engine;
  std::thread child([&] {
    ipc::IpcEngineServer server(p.child, 20ms);
    server.serve(engine, ipc::ReadyInfo{});
    ::close(p.child);
  });
  {
    ipc::IpcEngineClient client(p.front);
    client.wait_ready(std::chrono::steady_clock::now() + 5s);
    FaultSpec stall;
    stall.kind = FaultKind::kStallStep;
    stall.seconds = 4.0;
    stall.count = 2;
    client.inject_fault(stall);
    ASSERT_EQ(client.armed_faults().size(), 1u);  // mirrored at once
    ASSERT_TRUE(eventually([&] { return engine.faults.armed().size() == 1; }));
    EXPECT_EQ(engine.faults.armed()[0].count, 2);
    // The child takes a shot (a step struck): its report reaches the front.
    ASSERT_TRUE(engine.faults.take_stall().has_value());
    ASSERT_TRUE(eventually([&] {
      auto a = client.armed_faults();
      return a.size() == 1 && a[0].count == 1;
    }));
    // Count 0 disarms that kind.
    stall.count = 0;
    client.inject_fault(stall);
    EXPECT_TRUE(client.armed_faults().empty());
    ASSERT_TRUE(eventually([&] { return engine.faults.armed().empty(); }));
    client.clear_cache();
    client.clear_cache();
    ASSERT_TRUE(eventually([&] { return engine.clears.load() == 2; }));
    client.request_shutdown();
    child.join();
    // A dead engine refuses both, naming why.
    client.fail_all("gone for the test");
    EXPECT_THROW(client.inject_fault(stall), keel::Error);
    EXPECT_THROW(client.clear_cache(), keel::Error);
    EXPECT_TRUE(client.armed_faults().empty());
  }
}

// A request the front has ended never shows in the counts, even while the child's last
// report (sent before it saw the abort) still holds it.
TEST(IpcCounts, NoPhantomRequestsFromALaggingReport) {
  SocketPair p;
  ipc::IpcEngineClient client(p.front);
  ipc::FrameWriter child(p.child);
  ASSERT_TRUE(child.write(ipc::FrameType::kHello, ipc::encode_ready(ipc::ReadyInfo{})));
  client.wait_ready(std::chrono::steady_clock::now() + 5s);
  GenerationRequest r1, r2;
  r1.id = RequestId(1);
  r2.id = RequestId(2);
  client.submit(r1, [](const RequestEvent &) {});
  client.submit(r2, [](const RequestEvent &) {});
  EngineStatus st;
  st.running = 1;
  st.waiting = 1;
  st.steps = 9;
  ASSERT_TRUE(child.write(ipc::FrameType::kStatus, ipc::encode_status(st)));
  ASSERT_TRUE(eventually([&] { return client.status().steps == 9; }));
  EXPECT_EQ(client.status().running, 1);
  EXPECT_EQ(client.status().waiting, 1);
  client.abort(RequestId(1));  // e.g. a stop string matched at the front
  EXPECT_EQ(client.status().running + client.status().waiting, 1);
  EXPECT_EQ(client.status().running, 0);  // taken off running first
  client.abort(RequestId(2));
  EXPECT_EQ(client.status().running, 0);
  EXPECT_EQ(client.status().waiting, 0);
  // Preempted and loading are counted apart from waiting: a live one stays shown.
  GenerationRequest r3;
  r3.id = RequestId(3);
  client.submit(r3, [](const RequestEvent &) {});
  st.running = 0;
  st.waiting = 0;
  st.preempted = 1;
  st.steps = 10;
  ASSERT_TRUE(child.write(ipc::FrameType::kStatus, ipc::encode_status(st)));
  ASSERT_TRUE(eventually([&] { return client.status().steps == 10; }));
  EXPECT_EQ(client.status().preempted, 1);
  client.abort(RequestId(3));
  EXPECT_EQ(client.status().preempted, 0);
  // The child's finish events clear the front's record too.
  RequestEvent fin;
  fin.id = RequestId(1);
  fin.finish = FinishReason::kAbort;
  ASSERT_TRUE(child.write(ipc::FrameType::kEvent, ipc::encode_event(fin)));
  fin.id = RequestId(2);
  ASSERT_TRUE(child.write(ipc::FrameType::kEvent, ipc::encode_event(fin)));
  fin.id = RequestId(3);
  ASSERT_TRUE(child.write(ipc::FrameType::kEvent, ipc::encode_event(fin)));
  ASSERT_TRUE(eventually([&] { return client.in_flight() == 0; }));
  EXPECT_EQ(client.status().running, 0);
  ::close(p.child);
}

TEST(DebugFaultsBody, ValidatesEveryFieldByName) {
  using nlohmann::ordered_json;
  auto field_of = [](const char *text) -> std::string {
    try {
      server::parse_fault_request(ordered_json::parse(text));
    } catch (const server::ApiErrorException &e) {
      EXPECT_EQ(e.error.status, 400);
      return e.error.param;
    }
    return "(accepted)";
  };
  EXPECT_EQ(field_of(R"({"model":"m"})"), "kind");
  EXPECT_EQ(field_of(R"({"kind":"melt-down"})"), "kind");
  EXPECT_EQ(field_of(R"({"kind":7})"), "kind");
  EXPECT_EQ(field_of(R"({"kind":"stall-step","seconds":-1})"), "seconds");
  EXPECT_EQ(field_of(R"({"kind":"stall-step","seconds":"5"})"), "seconds");
  EXPECT_EQ(field_of(R"({"kind":"ssd-write-error","count":0})"), "count");
  EXPECT_EQ(field_of(R"({"kind":"ssd-write-error","count":1.5})"), "count");
  EXPECT_EQ(field_of(R"({"kind":"slow-store"})"), "seconds");
  EXPECT_EQ(field_of(R"({"kind":"crash-engine","seconds":1})"), "seconds");
  EXPECT_EQ(field_of(R"({"kind":"stall-step","sconds":1})"), "sconds");
  EXPECT_EQ(field_of(R"({"kind":"stall-step"})"), "(accepted)");
  auto s = server::parse_fault_request(
      ordered_json::parse(R"({"model":"m","kind":"slow-store","seconds":0.5,"count":4})"));
  EXPECT_EQ(s.kind, FaultKind::kSlowStore);
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(*s.seconds, 0.5);
  auto forever = server::parse_fault_request(ordered_json::parse(R"({"kind":"stall-step"})"));
  EXPECT_FALSE(forever.seconds.has_value());
  EXPECT_EQ(forever.count, 1);
}
