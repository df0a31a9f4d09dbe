#include "engine/tp/worker.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"
#include "engine/tp/messages.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/parallel/socket_communicator.h"

namespace keel::tp {

namespace {

constexpr std::uint32_t kPreambleMagic = 0x5750544b;  // "KTPW", see tp_group.cpp

// Rank and size, the first 12 bytes rank 0 writes.
bool read_preamble(int fd, std::uint32_t out[3]) {
  char *p = reinterpret_cast<char *>(out);
  std::size_t got = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (got < 12) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 1000) < 0 && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() >= until) return false;
    const ssize_t r = ::recv(fd, p + got, 12 - got, MSG_DONTWAIT);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return false;
    }
    got += static_cast<std::size_t>(r);
  }
  return out[0] == kPreambleMagic && out[2] >= 2 && out[1] >= 1 && out[1] < out[2];
}

}  // namespace

int run_tp_worker(int fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // again: an exec'ing wrapper may have cleared it
  ::signal(SIGPIPE, SIG_IGN);
  std::uint32_t pre[3] = {};
  if (!read_preamble(fd, pre)) {
    std::fprintf(stderr, "keel engine-tp-worker: no rank from rank 0 on fd %d\n", fd);
    ::close(fd);
    return 2;
  }
  const int rank = static_cast<int>(pre[1]);
  parallel::SocketCommunicator comm(rank, static_cast<int>(pre[2]), {fd});
  try {
    const WorkerConfig cfg = decode_config(comm.scatter({}));
    if (cfg.rank != rank || cfg.size != comm.size())
      throw Error(ErrorCode::kInternal, "tp worker: configuration for another rank");
    comm.set_op_timeout(std::chrono::milliseconds(cfg.op_timeout_ms));
    std::unique_ptr<ExecContext> ctx;
    std::unique_ptr<cpu::CpuModelRunner> runner;
    try {
      ctx = std::make_unique<ExecContext>(cfg.threads);
      runner = cpu::CpuModelRunner::open(cfg.model, *ctx,
                                         cpu::KvOptions{cfg.num_blocks, cfg.block_size}, &comm);
    } catch (const std::exception &e) {
      comm.gather(e.what());
      return 1;
    }
    comm.gather("ok");

    ForwardBatch batch;
    ForwardOutput out;
    std::string msg;
    cpu::CpuKvStore &kv = runner->local_kv();
    for (;;) {
      comm.broadcast_message(msg, std::nullopt);  // idle for as long as rank 0 is
      std::int32_t a = 0, b = 0;
      switch (command_of(msg)) {
        case Command::kForward:
          decode_forward(msg, batch);
          runner->forward(batch, out);
          break;
        case Command::kCopyBlock:
          decode_blocks(msg, a, b);
          kv.copy_block(a, b);
          break;
        case Command::kSaveBlock: {
          decode_blocks(msg, a, b);
          std::string mine(kv.block_bytes(), '\0');
          kv.save_block(a, std::as_writable_bytes(std::span(mine.data(), mine.size())));
          comm.gather(std::move(mine));
          break;
        }
        case Command::kLoadBlock: {
          decode_blocks(msg, a, b);
          const std::string mine = comm.scatter({});
          kv.load_block(a, std::as_bytes(std::span(mine.data(), mine.size())));
          break;
        }
        case Command::kShutdown:
          return 0;
      }
    }
  } catch (const std::exception &e) {
    // Rank 0 gone is the normal end of a worker whose group was torn down.
    const std::string &why = comm.broken_reason();
    if (why.find("closed") == std::string::npos && why.find("gone") == std::string::npos)
      std::fprintf(stderr, "keel engine-tp-worker rank %d: %s\n", rank, e.what());
    return 1;
  }
}

}  // namespace keel::tp
