// keel perplexity: the perplexity of a text under a model.
//
// Windowing (the same as scripts/default_model/PERPLEXITY.md, so a PyTorch script
// computes the same number): the file's text is encoded without special tokens into
// ids x[0..N). When the tokenizer has a BOS token, the ids are cut into
// non-overlapping windows of (context - 1) ids; each window is fed as [BOS] + window on
// a fresh cache, and every id of every window is scored (the first by the logits at
// BOS). Without a BOS token, windows hold `context` ids and the first id of each
// window is not scored. perplexity = exp(total NLL / number of scored ids).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "core/default_model.h"
#include "core/error.h"
#include "exec/cpu/activation.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/single_sequence.h"
#include "text/tokenizer.h"

namespace keel::cli {

int cmd_perplexity(int argc, char **argv) {
  CLI::App app{"keel perplexity: perplexity of a model on a text file"};
  std::string model, file;
  int context = 0, threads = 0;
  bool json = false;
  app.add_option("--model,-m", model,
                 "HF model directory or .gguf file (default: the built-in model)");
  app.add_option("--file,-f", file, "UTF-8 text file")->required();
  app.add_option("--context,-c", context,
                 "window length in tokens, BOS included (default: min(1024, model max))")
      ->check(CLI::Range(2, 1 << 20));
  app.add_option("--threads", threads, "compute threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  app.add_flag("--json", json, "print a JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }
  std::filesystem::path model_path = model;
  if (model.empty()) {
    auto d = default_model_dir();
    if (!d)
      throw Error(ErrorCode::kNotFound, "no --model given and no built-in default model found");
    model_path = *d;
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, file + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  auto tok = Tokenizer::load(model_path);
  const std::vector<TokenId> ids =
      tok->encode(buf.str(), {.allow_special = false, .add_bos = false});

  ExecContext ctx(threads);
  // Window length first needs the config: open with a minimal cache, then the real one.
  std::int64_t ctx_len = context;
  {
    auto probe = cpu::CpuModelRunner::open(model_path, ctx, {1, 16});
    if (ctx_len == 0)
      ctx_len = std::min<std::int64_t>(1024, probe->config().max_position_embeddings);
  }
  auto runner = cpu::CpuModelRunner::open(model_path, ctx,
                                          {static_cast<std::int32_t>((ctx_len + 15) / 16), 16});
  const auto bos = tok->bos();
  const std::int64_t V = runner->config().vocab_size;
  const std::int64_t win = bos ? ctx_len - 1 : ctx_len;

  SingleSequence seq(*runner, 256);
  double nll = 0;
  std::int64_t scored = 0;
  std::vector<float> lp(V);
  for (std::size_t w0 = 0; w0 < ids.size(); w0 += static_cast<std::size_t>(win)) {
    const std::size_t n = std::min<std::size_t>(win, ids.size() - w0);
    std::vector<TokenId> input;
    if (bos) input.push_back(*bos);
    input.insert(input.end(), ids.begin() + w0, ids.begin() + w0 + n);
    seq.reset();
    // Row i of the input predicts input[i + 1].
    seq.append_streaming(std::span<const TokenId>(input),
                         [&](std::size_t first, const float *rows, std::size_t count) {
                           for (std::size_t r = 0; r < count; ++r) {
                             const std::size_t i = first + r;
                             if (i + 1 >= input.size()) continue;
                             const TokenId target = input[i + 1];
                             cpu::log_softmax(rows + r * V, lp.data(), V);
                             nll -= lp[target];
                             ++scored;
                           }
                         });
  }
  if (scored == 0) throw Error(ErrorCode::kInvalidArgument, file + ": too few tokens to score");
  const double ppl = std::exp(nll / static_cast<double>(scored));
  if (json) {
    nlohmann::json j = {{"perplexity", ppl},
                        {"tokens", ids.size()},
                        {"scored", scored},
                        {"context", ctx_len},
                        {"bos", bos.has_value()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("perplexity %.4f over %lld scored tokens (%zu tokens in the file, context %lld)\n",
                ppl, static_cast<long long>(scored), ids.size(), static_cast<long long>(ctx_len));
  }
  return 0;
}

}  // namespace keel::cli
