// Issue 24 and issue 23 section 1 across real socket pairs: a child that never reads
// never blocks the front (submits, aborts, stops and teardown all return at once; its
// requests fail with errors naming the engine); the engine side's queue is bounded
// against a front that never reads, and serve() still ends in bounded time; a stop
// string's stop frame ends the request inside a real engine with finish kStop.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/ipc/client.h"
#include "engine/ipc/frame.h"
#include "engine/ipc/messages.h"
#include "engine/ipc/server.h"
#include "server/generation.h"
#include "unit/engine/collector.h"
#include "unit/engine/engine_test_util.h"
#include "unit/engine/toy_runner.h"
#include "unit/server/fakes.h"

using namespace keel;
using namespace keel::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

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

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

GenerationRequest long_request(std::uint64_t id, int prompt_tokens) {
  GenerationRequest r;
  r.id = RequestId(id);
  r.prompt.assign(static_cast<std::size_t>(prompt_tokens), 12345);
  r.sampling.max_tokens = 100;
  return r;
}

}  // namespace

// SIGSTOP seen from the front: the child said hello and reads nothing more.
TEST(IpcIsolation, AChildThatNeverReadsNeverBlocksTheFront) {
  SocketPair p;
  ipc::IpcClientOptions opts;
  opts.model = "stuck";
  opts.limits.max_bytes = 1 << 20;
  opts.limits.max_frames = 64;
  opts.limits.frame_deadline = 400ms;
  Collector c;  // outlives the client, whose teardown may still call its sinks
  auto client = std::make_unique<ipc::IpcEngineClient>(p.front, opts);
  ASSERT_TRUE(
      ipc::FrameWriter(p.child).write(ipc::FrameType::kHello, ipc::encode_ready(ipc::ReadyInfo{})));
  client->wait_ready(Clock::now() + 5s);

  int accepted = 0;
  std::vector<std::string> refusals;
  double worst_submit_ms = 0;
  const auto t0 = Clock::now();
  for (std::uint64_t id = 1; id <= 200; ++id) {
    const auto ts = Clock::now();
    try {
      client->submit(long_request(id, 2000 + static_cast<int>(id % 7) * 1000), c.sink());
      accepted++;
    } catch (const Error &e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
      refusals.push_back(e.what());
    }
    worst_submit_ms = std::max(worst_submit_ms, ms_since(ts));
  }
  EXPECT_LT(worst_submit_ms, 50.0) << "a submit waited for the child";
  ASSERT_GT(accepted, 0);
  ASSERT_FALSE(refusals.empty()) << "the queue never filled";
  EXPECT_NE(refusals[0].find("engine for model 'stuck'"), std::string::npos) << refusals[0];
  EXPECT_NE(refusals[0].find("queue is full"), std::string::npos) << refusals[0];

  // Clients leave: their aborts return at once too.
  double worst_abort_ms = 0;
  for (std::uint64_t id = 1; id <= 200; id += 2) {
    const auto ta = Clock::now();
    client->abort(RequestId(id));
    worst_abort_ms = std::max(worst_abort_ms, ms_since(ta));
  }
  EXPECT_LT(worst_abort_ms, 10.0);

  // Requests still queued end at their frame's deadline, with an error naming the
  // engine; the child shows as stalled, the verdict the supervisor acts on.
  ASSERT_TRUE(eventually([&] { return !client->write_stall().empty(); }, 2s));
  EXPECT_LT(ms_since(t0), 400.0 + 300.0);
  ASSERT_TRUE(eventually([&] { return c.finished() > 0; }, 1s));
  // Meanwhile new work is refused at once, naming the stall.
  try {
    client->submit(long_request(999, 10), c.sink());
    ADD_FAILURE() << "a submit to a stalled engine was accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("engine for model 'stuck' stalled"), std::string::npos)
        << e.what();
  }
  // The supervisor's kill fails the rest (those already in the socket's buffer).
  client->fail_all("engine for model 'stuck' stalled: " + client->write_stall());
  ASSERT_TRUE(c.wait_finished(static_cast<std::size_t>(accepted), 1s));
  int stalled = 0;
  const auto all = c.all();
  EXPECT_EQ(all.size(), static_cast<std::size_t>(accepted));
  for (const auto &[id, r] : all) {
    EXPECT_EQ(r.finishes, 1);
    EXPECT_EQ(r.finish, FinishReason::kError);
    if (r.error.find("engine for model 'stuck' stalled") != std::string::npos) stalled++;
  }
  EXPECT_EQ(stalled, accepted);
  EXPECT_EQ(client->status().running + client->status().waiting, 0);
  // Tearing down does not wait for the child either.
  const auto td = Clock::now();
  client.reset();
  EXPECT_LT(ms_since(td), 500.0);
  ::close(p.child);
}

// The engine side against a front that never reads: the engine thread never blocks
// (steps go on), token events past the bound end their requests, and serve() returns
// within its deadlines.
TEST(IpcIsolation, TheEngineSideQueueIsBoundedAndServeEndsWhenTheFrontNeverReads) {
  SocketPair p;
  ScriptEngine engine("abcdefgh", 1ms);
  ipc::WriterLimits lim;
  lim.max_bytes = 64 << 10;
  lim.max_frames = 64;
  lim.frame_deadline = 500ms;
  std::promise<int> rc;
  std::thread child([&] {
    ipc::IpcEngineServer server(p.child, 20ms, lim);
    server.set_log_info(false);
    rc.set_value(server.serve(engine, ipc::ReadyInfo{}));
  });
  ipc::FrameWriter front(p.front);
  for (std::uint64_t id = 1; id <= 20; ++id) {
    auto r = long_request(id, 4);
    r.sampling.max_tokens = 1'000'000;
    ASSERT_TRUE(front.write(ipc::FrameType::kSubmit, ipc::encode_submit(r)));
  }
  const auto t0 = Clock::now();
  const auto steps0 = engine.status().steps;
  // Steps keep coming while nobody reads (a blocked engine thread would make none); the
  // slack covers a loaded machine.
  EXPECT_TRUE(eventually([&] { return engine.status().steps > steps0 + 50; }, 3s))
      << "the engine thread blocked on the socket";
  // Full queue: the engine's requests are ended rather than queued without bound.
  EXPECT_TRUE(eventually([&] { return engine.status().running == 0; }, 10s));
  auto f = rc.get_future();
  const bool ended =
      f.wait_for(500ms + 2 * ipc::IpcEngineServer::kEndGrace + 5s) == std::future_status::ready;
  EXPECT_TRUE(ended) << "serve did not end";
  if (ended) {
    EXPECT_EQ(f.get(), 1);  // the front stopped reading: not an orderly end
    EXPECT_LT(ms_since(t0), 500.0 + 2 * 2000.0 + 5000.0);
  }
  // serve ends once its peer is gone: closing the front end makes sure, so the thread
  // (which uses this test's locals) is joined whatever failed above.
  ::shutdown(p.front, SHUT_RDWR);
  child.join();
  ::close(p.front);
  ::close(p.child);
}

// Issue 23, section 1: the front's stop reaches the engine as a stop frame and ends the
// request there with kStop; an abort still ends with kAbort.
TEST(IpcIsolation, AStopFrameEndsTheRequestInsideTheEngine) {
  SocketPair p;
  ToyEngine engine(64, 4, small_config(), [](ToyRunner &r) {
    r.on_forward = [](const ForwardBatch &) { std::this_thread::sleep_for(1ms); };
  });
  std::thread child([&] {
    ipc::IpcEngineServer server(p.child, 20ms);
    server.set_log_info(false);
    server.serve(*engine, ipc::ReadyInfo{});
  });
  {
    Collector c;
    ipc::IpcEngineClient client(p.front);
    client.wait_ready(Clock::now() + 5s);
    std::atomic<int> tokens1{0};
    EventSink sink = c.sink();
    client.submit(greedy_request(1, random_prompt(3, 5), 100000), [&, sink](const RequestEvent &e) {
      tokens1 += static_cast<int>(e.tokens.size());
      sink(e);
    });
    client.submit(greedy_request(2, random_prompt(4, 5), 100000), c.sink());
    ASSERT_TRUE(eventually([&] { return tokens1.load() >= 3; }));
    client.stop_request(RequestId(1));  // as Generation does when a stop string matched
    client.abort(RequestId(2));
    ASSERT_TRUE(c.wait_finished(2, 5s));
    EXPECT_EQ(c.get(1).finish, FinishReason::kStop);
    EXPECT_EQ(c.get(2).finish, FinishReason::kAbort);
    EXPECT_EQ(c.get(1).finishes, 1);
    ASSERT_TRUE(eventually([&] {
      auto s = engine->status();
      return s.running == 0 && s.waiting == 0 && s.kv_blocks_used == 0;
    }));
    client.request_shutdown();
    child.join();
  }
  ::close(p.child);
}

namespace {

// Forwards to the IPC client and records what the front asked and how the engine ended
// each request.
class Recording final : public EngineApi {
 public:
  explicit Recording(EngineApi &inner) : inner_(inner) {}
  void submit(GenerationRequest r, EventSink sink) override {
    inner_.submit(std::move(r), [this, sink](const RequestEvent &e) {
      if (e.finish) {
        std::lock_guard l(mu_);
        engine_finish_ = e.finish;
      }
      sink(e);
    });
  }
  void abort(RequestId) override { aborts_++; }  // not forwarded: must not be needed
  void stop_request(RequestId id) override {
    stops_++;
    inner_.stop_request(id);
  }
  EngineStatus status() const override { return inner_.status(); }
  std::optional<FinishReason> engine_finish() {
    std::lock_guard l(mu_);
    return engine_finish_;
  }
  std::atomic<int> aborts_{0}, stops_{0};

 private:
  EngineApi &inner_;
  std::mutex mu_;
  std::optional<FinishReason> engine_finish_;
};

}  // namespace

// The whole path of issue 23, section 1: Generation matches a stop string on the text,
// asks the engine to stop (no abort), and the engine ends the request with kStop.
TEST(IpcIsolation, AStopStringMatchedByTheFrontEndsTheRequestInTheEngine) {
  SocketPair p;
  ToyEngine engine(64, 4, small_config(), [](ToyRunner &r) {
    r.on_forward = [](const ForwardBatch &) { std::this_thread::sleep_for(1ms); };
  });
  std::thread child([&] {
    ipc::IpcEngineServer server(p.child, 20ms);
    server.set_log_info(false);
    server.serve(*engine, ipc::ReadyInfo{});
  });
  {
    ipc::IpcEngineClient client(p.front);
    client.wait_ready(Clock::now() + 5s);
    Recording rec(client);
    ByteText text;
    auto m = std::make_shared<LoadedModel>();
    m->id = "toy";
    m->engine = &rec;
    m->text = &text;
    m->info.context_length = 4096;
    // The toy model's greedy output is known: stop on its 6th and 7th tokens.
    const auto prompt = random_prompt(9, 5);
    const auto ref = toy_greedy(prompt, 12, kToyVocab);
    std::string ref_text;
    for (auto t : ref) ref_text.push_back(static_cast<char>(t));
    const std::string stop = ref_text.substr(5, 2);
    const std::string want = ref_text.substr(0, ref_text.find(stop));
    server::GenerationSpec spec;
    spec.prompts = {prompt};
    spec.sampling.temperature = 0.0f;
    spec.sampling.max_tokens = 100000;
    spec.stop = {stop};
    std::atomic<std::uint64_t> ids{1};
    std::promise<void> done;
    auto g = server::Generation::start(ModelLease(m, nullptr), spec, ids, nullptr,
                                       [&](const server::Generation &) { done.set_value(); });
    ASSERT_EQ(done.get_future().wait_for(5s), std::future_status::ready);
    EXPECT_EQ(g->results()[0].finish, FinishReason::kStop);
    EXPECT_EQ(g->results()[0].text, want);
    EXPECT_EQ(g->results()[0].stop_sequence, stop);
    EXPECT_EQ(rec.stops_.load(), 1);
    EXPECT_EQ(rec.aborts_.load(), 0);
    ASSERT_TRUE(eventually([&] { return rec.engine_finish().has_value(); }));
    EXPECT_EQ(*rec.engine_finish(), FinishReason::kStop);
    ASSERT_TRUE(eventually([&] {
      auto s = engine->status();
      return s.running == 0 && s.waiting == 0 && s.kv_blocks_used == 0;
    }));
    client.request_shutdown();
    child.join();
  }
  ::close(p.child);
}
