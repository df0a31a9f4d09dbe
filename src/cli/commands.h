// The subcommands of the one `keel` binary. Each lives in its own cmd_*.cpp and
// receives argv with the subcommand name at argv[0].
#pragma once

#include <filesystem>
#include <string>

namespace keel::cli {

int cmd_serve(int argc, char **argv);       // the server (front process)
int cmd_engine(int argc, char **argv);      // internal: one engine child process
int cmd_run(int argc, char **argv);         // one-shot generation
int cmd_bench(int argc, char **argv);       // serving benchmark against an OpenAI-compatible server
int cmd_pull(int argc, char **argv);        // download a model from a Hugging Face hub
int cmd_make_model(int argc, char **argv);  // random-weight models for tests and benchmarks
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);       // render a chat template
int cmd_perplexity(int argc, char **argv);     // perplexity of a model on a text file
int cmd_grammar_check(int argc, char **argv);  // MaskBench conformance of the JSON Schema grammars

// `--speculative draft:PATH` (keel engine, keel run): throws Error naming the flag when
// the draft model's tokenizer is not the target model's; nothing when either has none.
void check_draft_tokenizer(const std::filesystem::path &model, const std::string &method);

}  // namespace keel::cli
