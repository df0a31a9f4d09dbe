// keel detokenize --model PATH [--skip-special] ID...
// Prints the text of the token ids (valid UTF-8; bytes that form no character are
// printed as U+FFFD). IDs may also be given as one JSON array ("[1, 2, 3]").
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "text/tokenizer.h"

namespace keel::cli {

int cmd_detokenize(int argc, char **argv) {
  CLI::App app{"print the text of token ids", "keel detokenize"};
  std::string model;
  bool skip_special = false;
  std::vector<std::string> args;
  app.add_option("--model", model, "model directory, tokenizer.json, .model, .gguf or .tiktoken")
      ->required();
  app.add_flag("--skip-special", skip_special, "leave special tokens out");
  app.add_option("ids", args, "token ids")->required();
  CLI11_PARSE(app, argc, argv);
  std::vector<TokenId> ids;
  for (const std::string &a : args) {
    // Accept "1 2 3", "[1, 2, 3]" and "1,2,3".
    std::string cur;
    auto flush = [&] {
      if (cur.empty()) return;
      std::size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(cur, &used);
      } catch (const std::exception &) {
        used = 0;
      }
      if (used != cur.size() || v < 0 || v > INT32_MAX)
        throw Error(ErrorCode::kInvalidArgument, "not a token id: " + cur);
      ids.push_back(static_cast<TokenId>(v));
      cur.clear();
    };
    for (char c : a) {
      if (c == '[' || c == ']' || c == ',' || c == ' ' || c == '\n' || c == '\t')
        flush();
      else
        cur.push_back(c);
    }
    flush();
  }
  auto tok = Tokenizer::load(model);
  for (TokenId id : ids)
    if (static_cast<std::size_t>(id) >= tok->vocab_size())
      throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) +
                                                   " is out of range (vocabulary of " +
                                                   std::to_string(tok->vocab_size()) + ")");
  const std::string text = tok->decode(ids, skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace keel::cli
