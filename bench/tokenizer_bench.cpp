// Single-thread encode speed of keel's tokenizers on a text corpus, the same way
// scripts/ref/tokenizer_refs.py measures HF tokenizers: the whole text as one
// string (best of 3), then line by line (best of 2), no special tokens.
//
//   tokenizer_bench --corpus tests/fixtures/tokenizer/corpus.txt.zst \
//                   NAME=PATH_TO_TOKENIZER [NAME=PATH ...] [--ref-dir DIR]
//
// With --ref-dir, also checks the whole-text ids against DIR/NAME.ids (int32 LE).
#include <time.h>
#include <zstd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace {

std::string read_file(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string data = ss.str();
  if (path.ends_with(".zst")) {
    const unsigned long long n = ZSTD_getFrameContentSize(data.data(), data.size());
    if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN || n > (1ull << 32))
      throw std::runtime_error(path + ": bad zstd frame");
    std::string out(n, '\0');
    const size_t got = ZSTD_decompress(out.data(), out.size(), data.data(), data.size());
    if (ZSTD_isError(got)) throw std::runtime_error(path + ": " + ZSTD_getErrorName(got));
    out.resize(got);
    return out;
  }
  return data;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// This thread's CPU time: on a shared, overloaded machine wall time mostly measures
// the neighbours, so both are reported.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char **argv) {
  std::string corpus_path, ref_dir;
  std::vector<std::pair<std::string, std::string>> toks;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--corpus" && i + 1 < argc) {
      corpus_path = argv[++i];
    } else if (a == "--ref-dir" && i + 1 < argc) {
      ref_dir = argv[++i];
    } else if (auto eq = a.find('='); eq != std::string::npos) {
      toks.push_back({a.substr(0, eq), a.substr(eq + 1)});
    } else {
      std::fprintf(stderr,
                   "usage: tokenizer_bench --corpus FILE NAME=TOKENIZER... [--ref-dir DIR]\n");
      return 2;
    }
  }
  if (corpus_path.empty() || toks.empty()) {
    std::fprintf(stderr,
                 "usage: tokenizer_bench --corpus FILE NAME=TOKENIZER... [--ref-dir DIR]\n");
    return 2;
  }
  try {
    const std::string text = read_file(corpus_path);
    std::vector<std::string_view> lines;
    for (std::size_t pos = 0; pos < text.size();) {
      std::size_t e = text.find('\n', pos);
      e = e == std::string::npos ? text.size() : e + 1;
      lines.push_back(std::string_view(text).substr(pos, e - pos));
      pos = e;
    }
    const double mb = static_cast<double>(text.size()) / 1e6;
    int rc = 0;
    for (const auto &[name, path] : toks) {
      auto t0 = std::chrono::steady_clock::now();
      auto tok = keel::Tokenizer::load(path);
      const double load_s = seconds_since(t0);
      std::vector<keel::TokenId> ids;
      double whole = 1e9, per_line = 1e9, whole_cpu = 1e9, per_line_cpu = 1e9;
      for (int r = 0; r < 3; ++r) {
        t0 = std::chrono::steady_clock::now();
        const double c0 = thread_cpu_seconds();
        ids = tok->encode(text);
        whole = std::min(whole, seconds_since(t0));
        whole_cpu = std::min(whole_cpu, thread_cpu_seconds() - c0);
      }
      std::size_t n_line_tokens = 0;
      for (int r = 0; r < 2; ++r) {
        t0 = std::chrono::steady_clock::now();
        const double c0 = thread_cpu_seconds();
        n_line_tokens = 0;
        for (auto l : lines) n_line_tokens += tok->encode(l).size();
        per_line = std::min(per_line, seconds_since(t0));
        per_line_cpu = std::min(per_line_cpu, thread_cpu_seconds() - c0);
      }
      std::string check = "not checked";
      if (!ref_dir.empty()) {
        const std::string ref = read_file(ref_dir + "/" + name + ".ids");
        std::vector<keel::TokenId> want(ref.size() / 4);
        std::memcpy(want.data(), ref.data(), want.size() * 4);
        std::size_t first_diff = 0;
        while (first_diff < want.size() && first_diff < ids.size() &&
               want[first_diff] == ids[first_diff])
          ++first_diff;
        if (want == ids) {
          check = "ids identical to reference";
        } else {
          check = "MISMATCH at token " + std::to_string(first_diff);
          rc = 1;
        }
      }
      std::printf(
          "{\"tokenizer\": \"%s\", \"corpus_bytes\": %zu, \"tokens\": %zu, \"load_s\": %.3f, "
          "\"whole_text_MBps\": %.2f, \"line_by_line_MBps\": %.2f, \"whole_text_cpu_MBps\": %.2f, "
          "\"line_by_line_cpu_MBps\": %.2f, \"line_tokens\": %zu, \"check\": \"%s\"}\n",
          name.c_str(), text.size(), ids.size(), load_s, mb / whole, mb / per_line, mb / whole_cpu,
          mb / per_line_cpu, n_line_tokens, check.c_str());
    }
    return rc;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
}
