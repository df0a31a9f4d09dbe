// CPU serving benchmark (issue 20), three parts on one model:
//   step     batch-1 decode steps of the model in process: the forward pass, and the
//            sampling + logprob work per sampling mode on the step's own logits rows, new
//            Sampler ("now") and the sort-based one it replaced ("before", the tests'
//            reference, tests/unit/exec/sampler_reference.h), alternating; the share of a
//            step = sampling / (forward + sampling). Beside it the decode roofline: the
//            probe's read bandwidth / bytes read per token.
//   serve    a real `keel serve` (default flags, 127.0.0.1, --port 0) and N concurrent
//            non-streaming /v1/completions requests of --tokens tokens each (ignore_eos):
//            served tokens/s (completion tokens / wall) per stream count and mode, and
//            `keel run` greedy tokens/s on the same model for comparison.
//
//   cpu_serve_bench --model PATH [--keel build/keel] [--threads 0] [--parts step,serve]
//                   [--steps 24] [--streams 1,16,256] [--tokens 64]
//                   [--modes greedy,p09,t1,k40,minp,lp5,json]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../tests/unit/exec/sampler_reference.h"
#include "bench_args.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/sampler.h"
#include "exec/single_sequence.h"
#include "read_bandwidth.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
// CPU seconds of the calling thread: on a loaded machine the wall clock mostly measures
// other people's work.
double thread_cpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct Mode {
  const char *name;
  keel::SamplingParams params;
};

std::vector<Mode> modes() {
  std::vector<Mode> m;
  auto add = [&](const char *name, float t, int top_k, float top_p, float min_p, int logprobs) {
    keel::SamplingParams p;
    p.temperature = t, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p, p.logprobs = logprobs;
    m.push_back({name, p});
  };
  add("greedy", 0, 0, 1, 0, -1);
  add("temperature 1", 1, 0, 1, 0, -1);
  add("top-p 0.9", 1, 0, 0.9f, 0, -1);
  add("top-k 40", 1, 40, 1, 0, -1);
  add("min-p 0.05", 1, 0, 1, 0.05f, -1);
  add("greedy +logprobs 5", 0, 0, 1, 0, 5);
  add("temperature 1 +logprobs 5", 1, 0, 1, 0, 5);
  add("top-p 0.9 +logprobs 5", 1, 0, 0.9f, 0, 5);
  add("top-k 40 +logprobs 5", 1, 40, 1, 0, 5);
  add("min-p 0.05 +logprobs 5", 1, 0, 1, 0.05f, 5);
  return m;
}

// ------------------------------------------------------------------ in-process step
void step_part(const std::string &model, int threads, int steps) {
  using namespace keel;
  ExecContext ctx(threads);
  const int nt = ctx.pool().size();
  const std::int32_t block = 16, prompt = 32;
  const std::int32_t blocks = (prompt + steps + block) / block + 2;
  auto runner = cpu::CpuModelRunner::open(model, ctx, {blocks, block});
  const auto &cfg = runner->config();
  const int V = cfg.vocab_size;
  std::mt19937 rng(7);
  std::vector<TokenId> ids(prompt);
  for (auto &t : ids) t = static_cast<TokenId>(rng() % V);
  SingleSequence seq(*runner, prompt);
  std::vector<float> logits = seq.append(ids, false);
  std::vector<std::vector<float>> rows;
  std::vector<double> forward_s, forward_cpu;
  for (int i = 0; i < steps; ++i) {
    const auto next =
        static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const auto t0 = Clock::now();
    const double c0 = bench::cpu_seconds();
    logits = seq.append(std::span<const TokenId>(&next, 1), false);
    forward_s.push_back(since(t0));
    forward_cpu.push_back((bench::cpu_seconds() - c0) / nt);
    rows.push_back(logits);
  }
  const double fwd = median(forward_s), fwd_cpu = median(forward_cpu);
  std::printf("model %s: vocab %d, hidden %d, %d layers; threads %d; load %s\n", model.c_str(), V,
              static_cast<int>(cfg.hidden_size), static_cast<int>(cfg.num_layers), nt,
              loadavg().c_str());

  // The roofline: bytes one decode token reads (weights + f32 K/V at the mean context).
  ThreadPool probe(nt);
  const double bw = bench::read_bandwidth(probe).first;
  const double kv =
      2.0 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4 * (prompt + steps / 2.0);
  const double bytes = static_cast<double>(runner->decode_weight_bytes()) + kv;
  std::printf(
      "batch-1 decode: forward %.3f ms wall, %.3f ms CPU / threads (medians of %d) = "
      "%.1f tok/s (%.1f by CPU time); read bandwidth %.1f GB/s, %.1f MB/token: roofline "
      "%.1f tok/s, %.0f%% of it (%.0f%% by CPU time)\n",
      fwd * 1e3, fwd_cpu * 1e3, steps, 1 / fwd, 1 / fwd_cpu, bw / 1e9, bytes / 1e6, bw / bytes,
      100.0 * (1 / fwd) / (bw / bytes), 100.0 * (1 / fwd_cpu) / (bw / bytes));
  std::printf(
      "share of a step = sampling / (forward + sampling). wall: medians; CPU: forward by "
      "process CPU / threads, sampling by its thread's CPU (one thread). 'pool': the row "
      "split over the pool, as the engine samples a step of one row\n");
  std::printf("%-26s %8s %8s %8s %8s %9s %8s | %8s %8s %9s %8s\n", "sampling mode", "now ms",
              "now %", "pool ms", "pool %", "before ms", "before %", "now cpu", "now %",
              "before cpu", "before %");
  const std::vector<TokenId> prompt_ids(ids.begin(), ids.end());
  for (const Mode &m : modes()) {
    Sampler one(m.params, 1), split(m.params, 1);
    std::mt19937_64 draws(5);
    std::vector<double> now_s, now_c, pool_s, before_s, before_c;
    // Alternating, so that the load on the machine hits all alike.
    for (int rep = 0; rep < 3; ++rep)
      for (const auto &row : rows) {
        auto t0 = Clock::now();
        double c0 = thread_cpu();
        one.sample(row, prompt_ids, {});
        now_s.push_back(since(t0));
        now_c.push_back(thread_cpu() - c0);
        t0 = Clock::now();
        split.sample(row, prompt_ids, {}, &ctx.pool());
        pool_s.push_back(since(t0));
        const double u = std::uniform_real_distribution<double>(0, 1)(draws);
        t0 = Clock::now();
        c0 = thread_cpu();
        const TokenId t = test::reference_sample(row, m.params, prompt_ids, {}, u);
        std::vector<std::int32_t> top;
        // The old Sampler computed the logprob of every token, asked or not.
        volatile double lp = test::reference_logprob(row, t, std::max(m.params.logprobs, 0), &top);
        (void)lp;
        before_s.push_back(since(t0));
        before_c.push_back(thread_cpu() - c0);
      }
    const double now = median(now_s), pool = median(pool_s), before = median(before_s);
    const double nc = median(now_c), bc = median(before_c);
    auto pct = [](double part, double rest) { return 100 * part / (part + rest); };
    std::printf("%-26s %8.3f %7.2f%% %8.3f %7.2f%% %9.2f %7.1f%% | %8.3f %7.2f%% %9.2f %7.1f%%\n",
                m.name, now * 1e3, pct(now, fwd), pool * 1e3, pct(pool, fwd), before * 1e3,
                pct(before, fwd), nc * 1e3, pct(nc, fwd_cpu), bc * 1e3, pct(bc, fwd_cpu));
  }
}

// ------------------------------------------------------------------ keel serve over HTTP
struct Server {
  pid_t pid = -1;
  int port = 0;
};

Server start_server(const std::string &keel, const std::string &model) {
  int err[2];
  if (pipe(err) != 0) throw std::runtime_error("pipe");
  Server s;
  s.pid = fork();
  if (s.pid == 0) {
    dup2(err[1], 2);
    close(err[0]);
    execl(keel.c_str(), keel.c_str(), "serve", model.c_str(), "--host", "127.0.0.1", "--port", "0",
          static_cast<char *>(nullptr));
    _exit(127);
  }
  close(err[1]);
  FILE *f = fdopen(err[0], "r");
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    const char *at = std::strstr(line, "listening on http://127.0.0.1:");
    if (at) {
      s.port = std::atoi(at + std::strlen("listening on http://127.0.0.1:"));
      break;
    }
  }
  if (s.port == 0) throw std::runtime_error("keel serve did not start");
  // Keep draining its log so that it never blocks on a full pipe.
  std::thread([f] {
    char buf[4096];
    while (std::fgets(buf, sizeof buf, f)) {
    }
    std::fclose(f);
  }).detach();
  return s;
}

// One blocking POST; returns the response body ("" on failure).
std::string post(int port, const std::string &path, const std::string &body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "POST " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Connection: close\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  for (std::size_t off = 0; off < req.size();) {
    const ssize_t n = write(fd, req.data() + off, req.size() - off);
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  std::string resp;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
    resp.append(buf, static_cast<std::size_t>(n));
  close(fd);
  const auto at = resp.find("\r\n\r\n");
  return at == std::string::npos ? "" : resp.substr(at + 4);
}

int completion_tokens(const std::string &body) {
  const auto at = body.find("\"completion_tokens\":");
  return at == std::string::npos ? 0 : std::atoi(body.c_str() + at + 20);
}

// The tokens/s `keel run` reports for greedy decoding of `tokens` tokens.
double keel_run_tps(const std::string &keel, const std::string &model, int tokens) {
  const std::string cmd = keel + " run -m " + model + " -p Hello -n " + std::to_string(tokens) +
                          " --ignore-eos -t 0 2>&1 >/dev/null";
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return 0;
  char line[4096];
  double tps = 0;
  while (std::fgets(line, sizeof line, p)) {
    const char *at = std::strstr(line, "generated, ");
    if (at) tps = std::atof(at + std::strlen("generated, "));
  }
  pclose(p);
  return tps;
}

void serve_part(const std::string &keel, const std::string &model, const std::vector<int> &streams,
                int tokens, const std::vector<std::string> &mode_names) {
  const Server srv = start_server(keel, model);
  std::string id = model;
  while (!id.empty() && id.back() == '/') id.pop_back();
  id = id.substr(id.find_last_of('/') + 1);
  if (id.size() > 5 && id.substr(id.size() - 5) == ".gguf") id.resize(id.size() - 5);
  auto body = [&](const std::string &mode, int n) {
    std::string s = "{\"model\":\"" + id +
                    "\",\"prompt\":\"Hello\",\"max_tokens\":" + std::to_string(n) +
                    ",\"ignore_eos\":true,\"stream\":false";
    if (mode == "greedy") s += ",\"temperature\":0";
    if (mode == "p09") s += ",\"temperature\":1,\"top_p\":0.9";
    if (mode == "t1") s += ",\"temperature\":1";
    if (mode == "k40") s += ",\"temperature\":1,\"top_k\":40";
    if (mode == "minp") s += ",\"temperature\":1,\"min_p\":0.05";
    if (mode == "lp5") s += ",\"temperature\":0,\"logprobs\":5";  // greedy, top-5 logprobs
    // Greedy under a JSON schema (issue 17) that no request of --tokens completes, so
    // ignore_eos never meets a finished document: keys, strings and integers in turn.
    if (mode == "json")
      s += ",\"temperature\":0,\"structured_outputs\":{\"json\":{\"type\":\"array\","
           "\"minItems\":100,\"items\":{\"type\":\"object\",\"properties\":{\"name\":"
           "{\"type\":\"string\",\"maxLength\":8},\"age\":{\"type\":\"integer\"}},"
           "\"required\":[\"name\",\"age\"]}}}";
    return s + "}";
  };
  post(srv.port, "/v1/completions", body("greedy", 4));  // loads the model
  std::printf("serve: keel serve %s (default flags), %d tokens per request, load %s\n",
              model.c_str(), tokens, loadavg().c_str());
  std::printf("%-8s %8s %10s %12s %14s\n", "mode", "streams", "wall s", "tokens", "served tok/s");
  for (const std::string &mode : mode_names)
    for (int n : streams) {
      std::vector<int> got(n, 0);
      std::vector<std::thread> clients;
      const auto t0 = Clock::now();
      for (int i = 0; i < n; ++i)
        clients.emplace_back([&, i] {
          got[i] = completion_tokens(post(srv.port, "/v1/completions", body(mode, tokens)));
        });
      for (auto &c : clients) c.join();
      const double wall = since(t0);
      long total = 0;
      for (int g : got) total += g;
      std::printf("%-8s %8d %10.2f %12ld %14.1f\n", mode.c_str(), n, wall, total, total / wall);
    }
  kill(srv.pid, SIGTERM);
  waitpid(srv.pid, nullptr, 0);
  std::printf("keel run greedy (same model, %d tokens): %.1f tok/s, load %s\n", tokens,
              keel_run_tps(keel, model, tokens), loadavg().c_str());
}

}  // namespace

int main(int argc, char **argv) {
  std::string model, keel = "build/keel", parts = "step,serve", streams = "1,16,256",
                     mode_list = "greedy,p09";
  int threads = 0, steps = 24, tokens = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model = v;
    if (a == "--keel") keel = v;
    if (a == "--parts") parts = v;
    if (a == "--streams") streams = v;
    if (a == "--modes") mode_list = v;
    if (a == "--threads") threads = std::stoi(v);
    if (a == "--steps") steps = std::stoi(v);
    if (a == "--tokens") tokens = std::stoi(v);
  }
  if (model.empty()) {
    std::fprintf(stderr,
                 "usage: cpu_serve_bench --model PATH [--keel build/keel] [--threads 0] "
                 "[--parts step,serve] [--steps 24] [--streams 1,16,256] [--tokens 64] "
                 "[--modes greedy,p09,t1,json]\n");
    return 2;
  }
  std::printf("# %s\n", loadavg().c_str());
  for (const std::string &p : keel::bench::comma_list(parts)) {
    if (p == "step") step_part(model, threads, steps);
    if (p == "serve")
      serve_part(keel, model, keel::bench::int_list(streams), tokens,
                 keel::bench::comma_list(mode_list));
  }
  return 0;
}
