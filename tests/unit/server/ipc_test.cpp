// The engine IPC across a real socket pair: an IpcEngineServer serving a scripted
// engine on one end (as `keel engine` does) and the front's IpcEngineClient on the other.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include "core/error.h"
#include "engine/ipc/client.h"
#include "engine/ipc/frame.h"
#include "engine/ipc/messages.h"
#include "engine/ipc/server.h"
#include "unit/server/fakes.h"

using namespace keel;
using namespace std::chrono_literals;

namespace {

struct Pair {
  int front = -1, child = -1;
  Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    front = sv[0];
    child = sv[1];
  }
};

GenerationRequest request(std::uint64_t id, int max_tokens) {
  GenerationRequest r;
  r.id = RequestId(id);
  r.prompt = {1, 2, 3};
  r.sampling.max_tokens = max_tokens;
  r.sampling.seed = 5;
  r.sampling.stop_strings = {"x"};
  return r;
}

}  // namespace

TEST(IpcMessages, RoundTrip) {
  auto r = request(7, 9);
  r.deadline = std::chrono::steady_clock::now() + 10s;
  auto back = ipc::decode_submit(ipc::encode_submit(r));
  EXPECT_EQ(back.id, r.id);
  EXPECT_EQ(back.prompt, r.prompt);
  EXPECT_EQ(back.sampling.max_tokens, 9);
  EXPECT_EQ(back.sampling.seed, 5u);
  EXPECT_EQ(back.sampling.stop_strings, r.sampling.stop_strings);
  ASSERT_TRUE(back.deadline.has_value());
  RequestEvent e;
  e.id = RequestId(3);
  e.tokens = {4, 5};
  e.sampled_logprobs = {{4, -0.25f}, {5, -1.5f}};
  e.prompt_logprobs = {std::nullopt, TokenLogprob{2, -3.0f}};
  e.finish = FinishReason::kLength;
  auto eb = ipc::decode_event(ipc::encode_event(e));
  EXPECT_EQ(eb.tokens, e.tokens);
  EXPECT_FLOAT_EQ(eb.sampled_logprobs[1].logprob, -1.5f);
  EXPECT_FALSE(eb.prompt_logprobs[0].has_value());
  EXPECT_EQ(eb.finish, FinishReason::kLength);
  EXPECT_THROW(ipc::decode_event("{\"id\":1}"), keel::Error);
  EXPECT_THROW(ipc::decode_submit("not json"), keel::Error);
}

TEST(IpcFrame, RejectsOversizedAndUnknownFrames) {
  Pair p;
  unsigned char huge[5] = {0xff, 0xff, 0xff, 0x7f, 1};
  ASSERT_EQ(::write(p.front, huge, 5), 5);
  ipc::FrameReader reader(p.child);
  EXPECT_THROW(reader.read(), keel::Error);
  unsigned char unknown[5] = {0, 0, 0, 0, 99};
  ASSERT_EQ(::write(p.front, unknown, 5), 5);
  EXPECT_THROW(reader.read(), keel::Error);
  ::close(p.front);
  EXPECT_FALSE(reader.read().has_value());  // orderly EOF
  ::close(p.child);
}

TEST(Ipc, EventsStatusAbortAcrossTheSocket) {
  Pair p;
  test::ScriptEngine engine("abc", 2ms);
  std::thread child([&] {
    ipc::IpcEngineServer server(p.child, 20ms);
    ipc::ReadyInfo info;
    info.context_length = 128;
    info.vocab_size = 256;
    info.eos_token_ids = {0};
    server.serve(engine, info);
    ::close(p.child);
  });
  ipc::IpcEngineClient client(p.front);
  auto info = client.wait_ready(std::chrono::steady_clock::now() + 5s);
  EXPECT_EQ(info.context_length, 128);

  std::promise<std::vector<TokenId>> done;
  auto tokens = std::make_shared<std::vector<TokenId>>();
  client.submit(request(1, 6), [&, tokens](const RequestEvent &e) {
    tokens->insert(tokens->end(), e.tokens.begin(), e.tokens.end());
    if (e.finish) done.set_value(*tokens);
  });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), (std::vector<TokenId>{'a', 'b', 'c', 'a', 'b', 'c'}));

  // Abort: the finish arrives as kAbort.
  std::promise<FinishReason> aborted;
  client.submit(request(2, 1000000), [&](const RequestEvent &e) {
    if (e.finish) aborted.set_value(*e.finish);
  });
  std::this_thread::sleep_for(20ms);
  client.abort(RequestId(2));
  auto fa = aborted.get_future();
  ASSERT_EQ(fa.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(fa.get(), FinishReason::kAbort);
  EXPECT_GT(client.status().steps, 0u);  // heartbeats carry the engine's status
  EXPECT_LT(client.seconds_since_heard(), 1.0);

  client.request_shutdown();
  child.join();
}

TEST(Ipc, ADeadChildFailsEveryRequestAtOnce) {
  Pair p;
  ipc::IpcEngineClient client(p.front);
  // A fake child: says hello, then dies without a word about the requests.
  ipc::FrameWriter w(p.child);
  ipc::ReadyInfo info;
  ASSERT_TRUE(w.write(ipc::FrameType::kHello, ipc::encode_ready(info)));
  client.wait_ready(std::chrono::steady_clock::now() + 5s);
  std::promise<std::string> failed;
  client.submit(request(1, 10), [&](const RequestEvent &e) {
    if (e.finish == FinishReason::kError) failed.set_value(e.error);
  });
  ::close(p.child);
  auto f = failed.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_NE(f.get().find("exited"), std::string::npos);
  EXPECT_TRUE(client.dead());
  EXPECT_THROW(client.submit(request(2, 1), [](const RequestEvent &) {}), keel::Error);
}
