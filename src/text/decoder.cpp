#include "text/decoder.h"

#include <cstdio>

#include "text/byte_level.h"
#include "text/utf8.h"

namespace keel::text {

namespace {

class ByteLevelDecoder final : public DecoderStep {
 public:
  void apply(std::vector<std::string> &pieces) const override {
    for (auto &p : pieces) p = byte_level_decode(p);
  }
};

}  // namespace

bool parse_byte_token(std::string_view p, unsigned char &b) {
  if (p.size() != 6 || !p.starts_with("<0x") || p.back() != '>') return false;
  unsigned v = 0;
  for (int i = 3; i < 5; ++i) {
    char c = p[i];
    unsigned d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return false;
    v = v * 16 + d;
  }
  b = static_cast<unsigned char>(v);
  return true;
}

namespace {

class ByteFallbackDecoder final : public DecoderStep {
 public:
  // A run of byte pieces becomes its bytes when they are valid UTF-8, otherwise one
  // U+FFFD per byte piece, as HF does.
  void apply(std::vector<std::string> &pieces) const override {
    std::vector<std::string> out;
    std::string run;
    std::size_t run_len = 0;
    auto flush = [&] {
      if (run_len == 0) return;
      if (utf8_valid(run)) {
        out.push_back(run);
      } else {
        for (std::size_t i = 0; i < run_len; ++i) out.emplace_back(kReplacementChar);
      }
      run.clear();
      run_len = 0;
    };
    for (auto &p : pieces) {
      unsigned char b;
      if (parse_byte_token(p, b)) {
        run.push_back(static_cast<char>(b));
        ++run_len;
      } else {
        flush();
        out.push_back(std::move(p));
      }
    }
    flush();
    pieces.swap(out);
  }
};

void replace_all(std::string &s, const std::string &from, const std::string &to) {
  if (from.empty()) return;
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

class ReplaceDecoder final : public DecoderStep {
 public:
  ReplaceDecoder(std::string f, std::string t) : from_(std::move(f)), to_(std::move(t)) {}
  void apply(std::vector<std::string> &pieces) const override {
    for (auto &p : pieces) replace_all(p, from_, to_);
  }

 private:
  std::string from_, to_;
};

class FuseDecoder final : public DecoderStep {
 public:
  void apply(std::vector<std::string> &pieces) const override {
    std::string all;
    for (auto &p : pieces) all += p;
    pieces.assign(1, std::move(all));
  }
};

class StripDecoder final : public DecoderStep {
 public:
  StripDecoder(std::string c, int start, int stop) : c_(std::move(c)), start_(start), stop_(stop) {}
  void apply(std::vector<std::string> &pieces) const override {
    if (c_.empty()) return;
    for (auto &p : pieces) {
      for (int i = 0; i < start_ && p.starts_with(c_); ++i) p.erase(0, c_.size());
      for (int i = 0; i < stop_ && p.ends_with(c_); ++i) p.erase(p.size() - c_.size());
    }
  }

 private:
  std::string c_;
  int start_, stop_;
};

class MetaspaceDecoder final : public DecoderStep {
 public:
  MetaspaceDecoder(std::string r, int prepend) : rep_(std::move(r)), prepend_(prepend) {}
  void apply(std::vector<std::string> &pieces) const override {
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      replace_all(pieces[i], rep_, " ");
      if (i == 0 && prepend_ != 0 && pieces[i].starts_with(' ')) pieces[i].erase(0, 1);
    }
  }

 private:
  std::string rep_;
  int prepend_;
};

class WordPieceDecoder final : public DecoderStep {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void apply(std::vector<std::string> &pieces) const override {
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      auto &p = pieces[i];
      if (i != 0) {
        if (p.starts_with(prefix_))
          p.erase(0, prefix_.size());
        else
          p.insert(0, " ");
      }
      if (cleanup_) {
        for (auto [f, t] : {std::pair{" .", "."},
                            {" ?", "?"},
                            {" !", "!"},
                            {" ,", ","},
                            {" ' ", "'"},
                            {" n't", "n't"},
                            {" 'm", "'m"},
                            {" do not", " don't"},
                            {" 's", "'s"},
                            {" 've", "'ve"},
                            {" 're", "'re"}})
          replace_all(p, f, t);
      }
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

}  // namespace

std::unique_ptr<DecoderStep> make_byte_level_decoder() {
  return std::make_unique<ByteLevelDecoder>();
}
std::unique_ptr<DecoderStep> make_byte_fallback_decoder() {
  return std::make_unique<ByteFallbackDecoder>();
}
std::unique_ptr<DecoderStep> make_replace_decoder(std::string from, std::string to) {
  return std::make_unique<ReplaceDecoder>(std::move(from), std::move(to));
}
std::unique_ptr<DecoderStep> make_fuse_decoder() { return std::make_unique<FuseDecoder>(); }
std::unique_ptr<DecoderStep> make_strip_decoder(std::string content, int start, int stop) {
  return std::make_unique<StripDecoder>(std::move(content), start, stop);
}
std::unique_ptr<DecoderStep> make_metaspace_decoder(std::string replacement, int prepend) {
  return std::make_unique<MetaspaceDecoder>(std::move(replacement), prepend);
}
std::unique_ptr<DecoderStep> make_wordpiece_decoder(std::string prefix, bool cleanup) {
  return std::make_unique<WordPieceDecoder>(std::move(prefix), cleanup);
}

}  // namespace keel::text
