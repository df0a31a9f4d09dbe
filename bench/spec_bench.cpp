// Speculative decoding benchmark (issue 30), in process: the engine over the CPU runner,
// greedy, each workload run with speculation off and with n-gram lookup, alternating
// rounds; decode tokens/s (output tokens after the first / time after the first token),
// end-to-end tokens/s, and the acceptance length. Workloads:
//   edit    a code file, then "the same file with one name changed" begun: the model's
//           answer copies the file (the copy-heavy case)
//   prose   English prose to continue (nothing to copy: the case that must not lose)
//   batch   --batch concurrent edit requests (the adaptive policy's case)
//
//   spec_bench --model PATH [--threads 2] [--tokens 128] [--rounds 3] [--k 4] [--batch 8]
//              [--workloads edit,prose,batch]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "text/tokenizer.h"

namespace {

using namespace keel;
using Clock = std::chrono::steady_clock;

const char *kCode =
    "static int clamp(int v, int lo, int hi) {\n  if (v < lo) return lo;\n  if (v > hi) return "
    "hi;\n  return v;\n}\n\nint scale_value(struct state *state, int value) {\n  int factor = "
    "state->factor;\n  int offset = state->offset;\n  int result = value * factor + offset;\n  "
    "return clamp(result, state->min, state->max);\n}\n\nvoid reset_state(struct state *state) "
    "{\n  state->factor = 1;\n  state->offset = 0;\n  state->min = 0;\n  state->max = 255;\n}\n";

const char *kProse =
    "Once upon a time, in a small village by the sea, there lived an old fisherman and his "
    "daughter. Every morning they walked down to the harbour before the sun rose, and every "
    "evening they came home with the day's catch. One day the girl found a strange shell "
    "on the beach, and";

struct Run {
  double decode_tps = 0, e2e_tps = 0, acceptance_length = 0;
  std::int64_t tokens = 0;
  std::vector<TokenId> output;
};

struct Req {
  Clock::time_point start, first, end;
  std::vector<TokenId> tokens;
  bool done = false;
};

Run run(const std::string &model, int threads, const std::string &method, int k,
        const std::vector<std::vector<TokenId>> &prompts, int tokens) {
  CpuBackendOptions o;
  o.model = model;
  o.threads = threads;
  o.num_blocks = 1024;
  EngineConfig cfg;
  cfg.speculative.method = method;
  cfg.speculative.num_speculative_tokens = k;
  Engine e(cpu_backend(o), cfg);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Req> reqs(prompts.size());
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest g;
    g.id = RequestId{i + 1};
    g.prompt = prompts[i];
    g.sampling.temperature = 0;
    g.sampling.max_tokens = tokens;
    g.sampling.ignore_eos = true;
    reqs[i].start = t0;
    e.submit(g, [&, i](const RequestEvent &ev) {
      std::lock_guard lk(mu);
      Req &r = reqs[i];
      if (r.tokens.empty() && !ev.tokens.empty()) r.first = Clock::now();
      r.tokens.insert(r.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finish) {
        r.end = Clock::now();
        r.done = true;
        cv.notify_all();
      }
    });
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk,
            [&] { return std::all_of(reqs.begin(), reqs.end(), [](auto &r) { return r.done; }); });
  }
  Run out;
  Clock::time_point first = reqs[0].first, end = reqs[0].end;
  for (const Req &r : reqs) {
    out.tokens += static_cast<std::int64_t>(r.tokens.size());
    first = std::min(first, r.first);
    end = std::max(end, r.end);
  }
  const double decode_s = std::chrono::duration<double>(end - first).count();
  const double e2e_s = std::chrono::duration<double>(end - t0).count();
  out.decode_tps = (out.tokens - static_cast<std::int64_t>(reqs.size())) / decode_s;
  out.e2e_tps = out.tokens / e2e_s;
  const EngineStatus s = e.status();
  out.acceptance_length =
      s.spec_steps > 0 ? 1.0 + static_cast<double>(s.spec_accepted) / s.spec_steps : 0.0;
  out.output = reqs[0].tokens;
  return out;
}

}  // namespace

int main(int argc, char **argv) {
  std::map<std::string, std::string> a{{"--model", "models/default"},
                                       {"--threads", "2"},
                                       {"--tokens", "128"},
                                       {"--rounds", "3"},
                                       {"--k", "4"},
                                       {"--batch", "8"},
                                       {"--workloads", "edit,prose,batch"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!a.count(argv[i])) {
      std::fprintf(stderr, "spec_bench: unknown option %s\n", argv[i]);
      return 2;
    }
    a[argv[i]] = argv[i + 1];
  }
  const std::string model = a["--model"];
  const int threads = std::stoi(a["--threads"]);
  const int tokens = std::stoi(a["--tokens"]);
  const int rounds = std::stoi(a["--rounds"]);
  const int k = std::stoi(a["--k"]);
  const int batch = std::stoi(a["--batch"]);
  const std::string workloads = a["--workloads"];
  auto tok = Tokenizer::load(model);
  EncodeOptions eo;
  eo.add_bos = true;
  const std::string edit = std::string("// scale.c\n") + kCode +
                           "\n// scale.c with struct state renamed to struct config:\n";
  std::map<std::string, std::vector<std::vector<TokenId>>> sets;
  sets["edit"] = {tok->encode(edit, eo)};
  sets["prose"] = {tok->encode(kProse, eo)};
  for (int i = 0; i < batch; ++i)
    sets["batch"].push_back(tok->encode(edit + "// version " + std::to_string(i) + "\n", eo));
  std::printf("model %s, threads %d, %d tokens, k %d, best of %d rounds\n", model.c_str(), threads,
              tokens, k, rounds);
  std::printf("%-8s %-6s %12s %12s %10s %6s\n", "workload", "spec", "decode tok/s", "e2e tok/s",
              "acc.len", "same");
  for (const auto &[name, prompts] : sets) {
    if (workloads.find(name) == std::string::npos) continue;
    Run best[2];
    for (int r = 0; r < rounds; ++r)
      for (int m = 0; m < 2; ++m) {
        Run x = run(model, threads, m ? "ngram" : "", k, prompts, tokens);
        if (x.decode_tps > best[m].decode_tps) best[m] = x;
      }
    for (int m = 0; m < 2; ++m)
      std::printf("%-8s %-6s %12.1f %12.1f %10.2f %6s\n", name.c_str(), m ? "ngram" : "off",
                  best[m].decode_tps, best[m].e2e_tps, best[m].acceptance_length,
                  best[m].output == best[0].output ? "yes" : "NO");
    std::printf("%-8s speedup decode %.2fx, e2e %.2fx\n", name.c_str(),
                best[1].decode_tps / best[0].decode_tps, best[1].e2e_tps / best[0].e2e_tps);
    std::fflush(stdout);
  }
  return 0;
}
