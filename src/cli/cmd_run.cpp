// keel run: one-shot generation on the CPU backend, streamed to stdout.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli/commands.h"
#include "core/default_model.h"
#include "core/error.h"
#include "core/progress_bar.h"
#include "engine/speculative.h"
#include "engine/tp/group.h"
#include "engine/tp/runner.h"
#include "engine/weight_prefetch.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/sampler.h"
#include "exec/single_sequence.h"
#include "formats/gguf.h"
#include "kv/kv_sizing.h"
#include "text/jinja/chat_template.h"
#include "text/tokenizer.h"

namespace keel::cli {

namespace {

std::vector<TokenId> parse_ids(const std::string &s) {
  std::vector<TokenId> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      std::size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::out_of_range("id");
      ids.push_back(static_cast<TokenId>(v));
    } catch (const std::exception &) {
      throw Error(ErrorCode::kInvalidArgument, "--prompt-ids: '" + item + "' is not a token id");
    }
  }
  if (ids.empty()) throw Error(ErrorCode::kInvalidArgument, "--prompt-ids: no ids");
  return ids;
}

// Emits text as it becomes valid UTF-8: decodes everything generated so far and holds
// back a trailing replacement character that may still be an incomplete sequence.
class TextStream {
 public:
  explicit TextStream(const Tokenizer *tok) : tok_(tok) {}
  std::string push(TokenId id) {
    if (!tok_) return "";
    ids_.push_back(id);
    std::string all = tok_->decode(ids_);
    static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
    std::size_t ready = all.size();
    if (all.size() >= 3 && std::string_view(all).substr(all.size() - 3) == kReplacement &&
        held_ < 3) {
      ++held_;
      ready -= 3;
    } else {
      held_ = 0;
    }
    if (ready < printed_) return "";
    std::string out = all.substr(printed_, ready - printed_);
    printed_ = ready;
    return out;
  }
  std::string flush() {
    if (!tok_ || ids_.empty()) return "";
    std::string all = tok_->decode(ids_);
    std::string out = all.size() > printed_ ? all.substr(printed_) : "";
    printed_ = all.size();
    return out;
  }

 private:
  const Tokenizer *tok_;
  std::vector<TokenId> ids_;
  std::size_t printed_ = 0;
  int held_ = 0;
};

nlohmann::json top_json(const std::vector<TokenLogprob> &top) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto &t : top) a.push_back({t.token, t.logprob});
  return a;
}

}  // namespace

int cmd_run(int argc, char **argv) {
  CLI::App app{"keel run: generate a continuation of a prompt on the CPU"};
  std::string model, prompt, chat, prompt_ids, positional;
  int max_tokens = 128, threads = 0, logprobs = -1;
  float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f, rep = 1.0f, presence = 0.0f,
        frequency = 0.0f;
  int top_k = 0;
  std::optional<std::uint64_t> seed;
  bool echo = false, json = false, ignore_eos = false;
  app.add_option("--model,-m", model,
                 "HF model directory or .gguf file (default: the built-in model)");
  app.add_option("--prompt,-p", prompt, "prompt text");
  app.add_option("--chat", chat, "a user message, wrapped in the model's chat template");
  app.add_option("--prompt-ids", prompt_ids, "prompt as comma-separated token ids");
  app.add_option("text", positional, "prompt text (as --prompt)");
  app.add_option("-n,--max-tokens", max_tokens, "tokens to generate")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--temperature,-t", temperature, "0 (the default) is greedy")
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-k", top_k)->check(CLI::Range(0, 1 << 24));
  app.add_option("--top-p", top_p)->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--min-p", min_p)->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repetition-penalty", rep)->check(CLI::Range(0.01f, 100.0f));
  app.add_option("--presence-penalty", presence)->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--frequency-penalty", frequency)->check(CLI::Range(-2.0f, 2.0f));
  app.add_option("--seed", seed);
  app.add_option("--logprobs", logprobs, "report the top K alternatives of each token")
      ->check(CLI::Range(0, 100));
  app.add_flag("--echo", echo, "also report the prompt tokens (with their logprobs)");
  app.add_flag("--json", json, "one JSON object per token");
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-sequence tokens");
  app.add_option("--threads", threads, "compute threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  std::string speculative;
  int num_speculative_tokens = 4;
  app.add_option("--speculative", speculative,
                 "speculative decoding: off, ngram (prompt lookup), draft:PATH (a smaller "
                 "model with the same tokenizer) or eagle3:PATH (an EAGLE-3 head); the same "
                 "output, several tokens a step");
  app.add_option("--num-speculative-tokens", num_speculative_tokens,
                 "drafted tokens verified per step at most")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  int tensor_parallel = 1;
  app.add_option("--tensor-parallel", tensor_parallel,
                 "split the model over N processes (CPU tensor parallelism)")
      ->check(CLI::Range(1, 64));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }
  if (!positional.empty()) {
    if (!prompt.empty())
      throw Error(ErrorCode::kInvalidArgument, "give the prompt once: --prompt or positional text");
    prompt = positional;
  }
  const int given = !prompt.empty() + !chat.empty() + !prompt_ids.empty();
  if (given != 1)
    throw Error(ErrorCode::kInvalidArgument,
                "give exactly one of --prompt, --chat, --prompt-ids or TEXT");

  std::filesystem::path model_path;
  if (model.empty()) {
    auto d = default_model_dir();
    if (!d)
      throw Error(ErrorCode::kNotFound,
                  "no --model given and no built-in default model found (set KEEL_DEFAULT_MODEL or "
                  "pass --model)");
    model_path = *d;
  } else {
    model_path = model;
  }

  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::load(model_path);
  } catch (const Error &e) {
    if (prompt_ids.empty()) throw;  // text needs a tokenizer
  }

  std::vector<TokenId> ids;
  if (!prompt_ids.empty()) {
    ids = parse_ids(prompt_ids);
  } else if (!chat.empty()) {
    ChatTemplate tpl = ChatTemplate::load(model_path);
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    msgs.push_back({{"role", "user"}, {"content", chat}});
    const std::string text = tpl.render(msgs, nullptr, true);
    ids = tok->encode(text, {.allow_special = true, .add_bos = false});
  } else {
    ids = tok->encode(prompt, {.allow_special = false, .add_bos = true});
  }
  if (ids.empty()) throw Error(ErrorCode::kInvalidArgument, "the prompt has no tokens");

  ExecContext ctx(tensor_parallel > 1 ? tp::threads_per_rank(threads, tensor_parallel) : threads);
  const std::int64_t need = static_cast<std::int64_t>(ids.size()) + max_tokens + 1;
  cpu::KvOptions kvo;
  kvo.block_size = 16;
  kvo.num_blocks = static_cast<std::int32_t>((need + 15) / 16);
  {
    // The weights' disk time, shown as it passes (a bar on a terminal, lines otherwise)
    // for models big enough to take a while; the runner then finds them cached.
    constexpr std::int64_t kShowFrom = std::int64_t{256} << 20;
    std::unique_ptr<ProgressBar> bar;
    PrefetchOptions po;
    po.max_bytes = host_mem_available().value_or(0) / 4 * 3;
    prefetch_weights(weight_files_of(model_path), po, [&](std::int64_t done, std::int64_t total) {
      if (!bar && total >= kShowFrom)
        bar = std::make_unique<ProgressBar>(stderr, "reading weights", total,
                                            ProgressBar::Unit::kBytes);
      if (bar) bar->update(done);
    });
    if (bar) bar->finish();
  }
  std::unique_ptr<ModelRunner> runner;
  if (tensor_parallel > 1) {
    tp::TpRunnerOptions o;
    o.model = model_path;
    o.size = tensor_parallel;
    o.threads_per_rank = tp::threads_per_rank(threads, tensor_parallel);
    o.kv = kvo;
    o.on_lost = tp::exit_on_group_lost();
    runner = std::make_unique<tp::TpCpuRunner>(o, ctx);
  } else {
    runner = cpu::CpuModelRunner::open(model_path, ctx, kvo);
  }
  // Drafts, verified like the engine's (engine/speculative.h): every row sampled as
  // without them, drafts kept while they equal the sampled token.
  SpeculativeConfig spec;
  spec.method = parse_speculative_method(speculative);
  spec.num_speculative_tokens = num_speculative_tokens;
  if (spec.method == "mtp")
    throw Error(ErrorCode::kUnsupported,
                "--speculative mtp: keel run does not hand the MTP layer the model's hidden "
                "states (keel serve does)");
  if (draft_model_path(spec.method)) check_draft_tokenizer(model_path, spec.method);
  // As in the engine, n-gram lookup is simply off where the runner cannot verify.
  std::unique_ptr<Drafter> drafter;
  if (runner->verifies_drafts() || draft_model_path(spec.method) || eagle3_head_path(spec.method))
    drafter = make_drafter(spec, runner.get());
  const ModelConfig &cfg = runner->config();
  for (TokenId t : ids)
    if (t < 0 || t >= cfg.vocab_size)
      throw Error(ErrorCode::kInvalidArgument,
                  "prompt token " + std::to_string(t) + " is outside the vocabulary");

  SamplingParams sp;
  sp.temperature = temperature;
  sp.top_k = top_k;
  sp.top_p = top_p;
  sp.min_p = min_p;
  sp.repetition_penalty = rep;
  sp.presence_penalty = presence;
  sp.frequency_penalty = frequency;
  sp.seed = seed;
  sp.max_tokens = max_tokens;
  // --json reports every token's logprob: the Sampler computes it only when asked.
  sp.logprobs = json ? std::max(logprobs, 0) : logprobs;
  sp.ignore_eos = ignore_eos;
  Sampler sampler(sp, std::random_device{}());
  std::vector<TokenId> eos = cfg.eos_token_ids;
  if (tok)
    for (TokenId e : tok->eos_ids())
      if (std::find(eos.begin(), eos.end(), e) == eos.end()) eos.push_back(e);

  SingleSequence seq(*runner);
  const std::size_t V = static_cast<std::size_t>(cfg.vocab_size);
  const int top_n = logprobs > 0 ? logprobs : 0;
  auto emit = [&](const nlohmann::json &j) {
    std::fputs((j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n").c_str(),
               stdout);
    std::fflush(stdout);
  };
  // A drafter that reads the target's hidden states (EAGLE-3) gets each append's rows, as
  // the engine hands them over (Engine::observe_hidden): positions [start, start + n), and
  // the tokens known so far (the one about to be sampled not among them).
  const bool hidden = drafter && drafter->wants_hidden();
  if (hidden) seq.keep_hidden(drafter->hidden_layers());
  auto observe = [&](std::int64_t start, std::size_t n, std::span<const TokenId> known) {
    if (hidden)
      drafter->observe_hidden(RequestId{1}, known, static_cast<std::int32_t>(start),
                              static_cast<std::int32_t>(n), seq.hidden());
  };
  std::vector<float> logits = seq.append(ids, echo);
  observe(0, ids.size(), ids);
  if (echo) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::string piece = tok ? tok->decode(std::span<const TokenId>(&ids[i], 1)) : "";
      if (json) {
        nlohmann::json j = {{"id", ids[i]}, {"text", piece}};
        if (i == 0) {
          j["logprob"] = nullptr;
        } else {
          auto r =
              logprobs_of(std::span<const float>(logits.data() + (i - 1) * V, V), ids[i], top_n);
          j["logprob"] = r.logprob;
          if (logprobs >= 0) j["top"] = top_json(r.top);
        }
        emit(j);
      }
    }
    if (!json && tok) {
      std::fputs(tok->decode(ids).c_str(), stdout);
      std::fflush(stdout);
    }
    logits.erase(logits.begin(), logits.end() - static_cast<std::ptrdiff_t>(V));
  }

  TextStream stream(tok.get());
  std::vector<TokenId> generated;
  // Emits a sampled token; true when generation ends with it.
  auto take = [&](const SampledToken &r) {
    generated.push_back(r.token);
    const bool stop = sampler.is_stop_token(r.token, eos);
    std::string text = stop ? "" : stream.push(r.token);
    if (json) {
      nlohmann::json j = {{"id", r.token}, {"text", text}, {"logprob", r.logprob}};
      if (logprobs >= 0) j["top"] = top_json(r.top);
      emit(j);
    } else if (!text.empty()) {
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
    }
    return stop || static_cast<int>(generated.size()) >= max_tokens;
  };
  std::vector<TokenId> draft, all = ids, step_tokens;
  std::int64_t drafted = 0, accepted = 0;
  AcceptanceTracker tracker;  // drafting pauses while few drafts are accepted
  const auto t0 = std::chrono::steady_clock::now();
  // `logits` holds a row per position of the last append that may be sampled: the last
  // token's, then one after each draft.
  for (bool done = max_tokens <= 0; !done;) {
    TokenId next = 0;
    std::int32_t kept = 0;
    for (std::size_t j = 0; j <= draft.size(); ++j) {
      const SampledToken r =
          sampler.sample(std::span<const float>(logits.data() + j * V, V), ids, generated);
      done = take(r);
      const bool match = j < draft.size() && r.token == draft[j];
      kept += match;
      if (done) break;
      if (match) continue;
      seq.truncate(seq.length() - static_cast<std::int64_t>(draft.size() - j));
      next = r.token;
      break;
    }
    accepted += kept;
    if (!draft.empty()) tracker.record(static_cast<std::int32_t>(draft.size()), kept);
    if (done) break;
    step_tokens.assign(1, next);
    draft.clear();
    if (drafter && tracker.should_draft()) {
      all.assign(ids.begin(), ids.end());
      all.insert(all.end(), generated.begin(), generated.end());
      // k drafts may emit k + 1 tokens: never past max_tokens.
      const auto k = std::min<std::int64_t>(
          num_speculative_tokens, max_tokens - static_cast<std::int64_t>(generated.size()) - 1);
      if (k > 0) drafter->propose(RequestId{1}, all, static_cast<std::int32_t>(k), draft);
      if (static_cast<std::int64_t>(draft.size()) > k) draft.resize(static_cast<std::size_t>(k));
      drafted += static_cast<std::int64_t>(draft.size());
      step_tokens.insert(step_tokens.end(), draft.begin(), draft.end());
    }
    const std::int64_t start = seq.length();
    logits = seq.append(step_tokens, !draft.empty());
    if (hidden) {
      all.assign(ids.begin(), ids.end());
      all.insert(all.end(), generated.begin(), generated.end());
      observe(start, step_tokens.size(), all);
    }
  }
  if (!json) {
    std::fputs((stream.flush() + "\n").c_str(), stdout);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string weights = runner->weight_format();
    std::string spec_line;
    if (drafter)
      spec_line = "; speculative " + std::string(drafter->name()) + ": " +
                  std::to_string(accepted) + " of " + std::to_string(drafted) + " drafts accepted";
    std::fprintf(stderr, "[%zu prompt tokens, %zu generated, %.2f tokens/s; weights %s%s]\n",
                 ids.size(), generated.size(), generated.empty() ? 0.0 : generated.size() / s,
                 weights.c_str(), spec_line.c_str());
  }
  return 0;
}

}  // namespace keel::cli
