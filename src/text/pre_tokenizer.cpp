#include "text/pre_tokenizer.h"

namespace keel::text {

namespace {

class Split final : public PreTokenizerStep {
 public:
  Split(std::unique_ptr<Regex> re, SplitBehavior b, bool invert)
      : re_(std::move(re)), behavior_(b), invert_(invert) {}

  void split(std::string_view text, bool, WordSink sink) const override {
    // Fast path for the common byte-level case: isolated matches, gaps passed on.
    if (behavior_ == SplitBehavior::kIsolated) {
      std::size_t last = 0;
      re_->for_each_match(text, [&](std::size_t b, std::size_t e) {
        if (b > last) sink(text.substr(last, b - last));
        sink(text.substr(b, e - b));
        last = e;
      });
      if (last < text.size()) sink(text.substr(last));
      return;
    }
    struct Seg {
      std::size_t b, e;
      bool match;
    };
    std::vector<Seg> segs;
    std::size_t last = 0;
    re_->for_each_match(text, [&](std::size_t b, std::size_t e) {
      if (b > last) segs.push_back({last, b, invert_});
      segs.push_back({b, e, !invert_});
      last = e;
    });
    if (last < text.size()) segs.push_back({last, text.size(), invert_});
    switch (behavior_) {
      case SplitBehavior::kRemoved:
        for (const Seg &s : segs)
          if (!s.match) sink(text.substr(s.b, s.e - s.b));
        break;
      case SplitBehavior::kIsolated:
        for (const Seg &s : segs) sink(text.substr(s.b, s.e - s.b));
        break;
      case SplitBehavior::kMergedWithPrevious: {
        std::size_t start = 0;
        bool open = false;
        for (const Seg &s : segs) {
          if (s.match && open) {
            sink(text.substr(start, s.e - start));
            open = false;
          } else if (s.match) {
            sink(text.substr(s.b, s.e - s.b));
          } else {
            if (open) sink(text.substr(start, s.b - start));
            start = s.b;
            open = true;
          }
        }
        if (open) sink(text.substr(start));
        break;
      }
      case SplitBehavior::kMergedWithNext: {
        std::size_t start = 0;
        bool open = false;
        for (const Seg &s : segs) {
          if (s.match) {
            if (open) sink(text.substr(start, s.b - start));
            start = s.b;
            open = true;
          } else {
            sink(text.substr(open ? start : s.b, s.e - (open ? start : s.b)));
            open = false;
          }
        }
        if (open) sink(text.substr(start));
        break;
      }
      case SplitBehavior::kContiguous: {
        std::size_t i = 0;
        while (i < segs.size()) {
          std::size_t j = i + 1;
          if (segs[i].match)
            while (j < segs.size() && segs[j].match) ++j;
          sink(text.substr(segs[i].b, segs[j - 1].e - segs[i].b));
          i = j;
        }
        break;
      }
    }
  }

 private:
  std::unique_ptr<Regex> re_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevel final : public PreTokenizerStep {
 public:
  ByteLevel(bool prefix, std::unique_ptr<Regex> re) : prefix_(prefix), re_(std::move(re)) {}
  void split(std::string_view text, bool, WordSink sink) const override {
    std::string buf;
    if (prefix_ && !text.starts_with(' ')) {
      buf.reserve(text.size() + 1);
      buf.push_back(' ');
      buf.append(text);
      text = buf;
    }
    if (!re_) {
      sink(text);
      return;
    }
    std::size_t last = 0;
    re_->for_each_match(text, [&](std::size_t b, std::size_t e) {
      if (b > last) sink(text.substr(last, b - last));
      sink(text.substr(b, e - b));
      last = e;
    });
    if (last < text.size()) sink(text.substr(last));
  }

 private:
  bool prefix_;
  std::unique_ptr<Regex> re_;
};

class Metaspace final : public PreTokenizerStep {
 public:
  Metaspace(std::string rep, int prepend, bool split)
      : rep_(std::move(rep)), prepend_(prepend), split_(split) {}
  void split(std::string_view text, bool at_start, WordSink sink) const override {
    if (rep_.empty()) {  // a lying file: nothing to replace or split on
      sink(text);
      return;
    }
    std::string s;
    s.reserve(text.size() + rep_.size() * 4);
    const bool add = prepend_ == 2 || (prepend_ == 1 && at_start);
    if (add && !text.starts_with(rep_) && !text.starts_with(' ')) s.append(rep_);
    for (char c : text) {
      if (c == ' ')
        s.append(rep_);
      else
        s.push_back(c);
    }
    if (!split_) {
      sink(s);
      return;
    }
    // Split before every replacement character (MergedWithNext).
    std::size_t start = 0;
    std::size_t pos = s.find(rep_, 1);
    while (pos != std::string::npos) {
      if (pos > start) sink(std::string_view(s).substr(start, pos - start));
      start = pos;
      pos = s.find(rep_, pos + rep_.size());
    }
    if (start < s.size()) sink(std::string_view(s).substr(start));
  }

 private:
  std::string rep_;
  int prepend_;
  bool split_;
};

}  // namespace

std::unique_ptr<PreTokenizerStep> make_split(std::unique_ptr<Regex> regex, SplitBehavior behavior,
                                             bool invert) {
  return std::make_unique<Split>(std::move(regex), behavior, invert);
}
std::unique_ptr<PreTokenizerStep> make_byte_level(bool add_prefix_space,
                                                  std::unique_ptr<Regex> regex) {
  return std::make_unique<ByteLevel>(add_prefix_space, std::move(regex));
}
std::unique_ptr<PreTokenizerStep> make_metaspace(std::string replacement, int prepend, bool split) {
  return std::make_unique<Metaspace>(std::move(replacement), prepend, split);
}

}  // namespace keel::text
