// keel tokenize --model PATH [--special] [--bos] TEXT
// Prints the token ids of TEXT as a JSON array. PATH is an HF model directory, a
// tokenizer.json, a SentencePiece .model, a .gguf or a .tiktoken file. --special cuts
// special tokens ("<|im_start|>") out of the text; --bos applies the tokenizer's
// post-processor (BOS / EOS). TEXT "-" reads standard input.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "cli/commands.h"
#include "text/tokenizer.h"

namespace keel::cli {

int cmd_tokenize(int argc, char **argv) {
  CLI::App app{"print the token ids of a text as a JSON array", "keel tokenize"};
  std::string model, text;
  bool special = false, bos = false;
  app.add_option("--model", model, "model directory, tokenizer.json, .model, .gguf or .tiktoken")
      ->required();
  app.add_flag("--special", special, "split special tokens out of the text");
  app.add_flag("--bos", bos, "add the tokens the tokenizer's post-processor adds (BOS)");
  app.add_option("text", text, "the text (- for standard input)")->required();
  CLI11_PARSE(app, argc, argv);
  if (text == "-")
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  auto tok = Tokenizer::load(model);
  const auto ids = tok->encode(text, {.allow_special = special, .add_bos = bos});
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace keel::cli
