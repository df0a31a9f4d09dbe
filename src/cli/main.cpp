#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>

#include "cli/commands.h"
#include "cli/version.h"
#include "core/error.h"

namespace keel::cli {
// src/cli/cmd_engine_tp.cpp ("tp"): a tensor-parallel worker rank, spawned by `keel engine`.
int cmd_engine_tp_worker(int argc, char **argv);
}  // namespace keel::cli

namespace {

struct Subcommand {
  const char *name;
  int (*run)(int, char **);
  const char *help;
};

constexpr Subcommand kSubcommands[] = {
    {"serve", keel::cli::cmd_serve, "serve models over the OpenAI and Anthropic APIs"},
    {"run", keel::cli::cmd_run, "generate a continuation of a prompt"},
    {"bench", keel::cli::cmd_bench, "benchmark a server (OpenAI-compatible; --self: keel)"},
    {"pull", keel::cli::cmd_pull, "download a model from a Hugging Face hub into the cache"},
    {"make-model", keel::cli::cmd_make_model, "write a random-weight model"},
    {"tokenize", keel::cli::cmd_tokenize, "print the token ids of a text"},
    {"detokenize", keel::cli::cmd_detokenize, "print the text of token ids"},
    {"template", keel::cli::cmd_template, "render a chat template"},
    {"perplexity", keel::cli::cmd_perplexity, "perplexity of a model on a text file"},
    {"grammar-check", keel::cli::cmd_grammar_check,
     "check JSON Schema grammars against MaskBench test files"},
    {"engine", keel::cli::cmd_engine, "(internal) one engine process"},
    {"engine-tp-worker", keel::cli::cmd_engine_tp_worker,
     "(internal) one tensor-parallel worker rank of an engine"},
};

void print_usage() {
  std::printf("keel %s: an LLM inference server\n\nusage: keel <command> [options]\n\n",
              keel::cli::version_string().c_str());
  for (const auto &s : kSubcommands) std::printf("  %-12s %s\n", s.name, s.help);
  std::printf("\n  keel <command> --help for its options; keel --version for the build.\n");
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::printf("%s\n", keel::cli::version_report().c_str());
    return 0;
  }
  for (const auto &s : kSubcommands) {
    if (std::string_view(argv[1]) == s.name) {
      try {
        return s.run(argc - 1, argv + 1);
      } catch (const keel::Error &e) {
        std::fprintf(stderr, "keel %s: %s\n", s.name, e.what());
        return 1;
      } catch (const std::exception &e) {
        std::fprintf(stderr, "keel %s: %s\n", s.name, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "keel: unknown command '%s'\n\n", argv[1]);
  print_usage();
  return 2;
}
