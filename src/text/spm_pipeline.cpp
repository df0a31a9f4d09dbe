#include "text/spm_pipeline.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "text/bpe_model.h"
#include "text/unigram_model.h"
#include "text/utf8.h"

namespace keel::text {

namespace {
constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581
}

TokenizerParts build_spm_parts(SpmVocab v) {
  TokenizerParts parts;
  parts.origin = v.origin;
  const std::size_t n = v.pieces.size();
  v.scores.resize(n, 0.0f);
  v.types.resize(n, kSpmNormal);
  parts.pieces = v.pieces;
  parts.special.assign(n, 0);

  // Control and unknown pieces are special added tokens; user-defined pieces are
  // matched whole in the text, like HF's converted tokenizers do.
  std::vector<AddedToken> added;
  for (std::size_t id = 0; id < n; ++id) {
    const int t = v.types[id];
    if (t == kSpmControl || t == kSpmUnknown || t == kSpmUserDefined) {
      const bool special = t != kSpmUserDefined;
      parts.special[id] = special;
      if (!v.pieces[id].empty()) added.push_back({static_cast<TokenId>(id), v.pieces[id], special});
    }
  }
  parts.added.build(std::move(added));

  if (v.remove_extra_whitespaces) parts.normalizer.add(make_collapse_spaces());
  if (v.has_charsmap && v.normalizer_name != "identity")
    parts.normalizer.add(make_unicode_normalizer(UnicodeForm::kNFKC));
  parts.normalizer.add(make_replace(" ", std::string(kSpace)));
  if (v.add_dummy_prefix) parts.normalizer.add(make_prepend(std::string(kSpace)));

  auto valid = [&](std::int32_t id) { return id >= 0 && static_cast<std::size_t>(id) < n; };
  std::optional<TokenId> unk;
  if (valid(v.unk_id)) unk = v.unk_id;

  if (v.bpe) {
    // SentencePiece BPE merges the adjacent pair whose union is the highest-scoring
    // piece. As ranks: every split of a piece into two pieces is a merge, ranked by
    // the piece's score (equal scores share a rank, so ties go leftmost).
    std::vector<std::string> symbols(n);
    std::unordered_map<std::string_view, TokenId> index;
    for (std::size_t id = 0; id < n; ++id) {
      const int t = v.types[id];
      if (t == kSpmNormal || t == kSpmUserDefined || t == kSpmByte) {
        symbols[id] = v.pieces[id];
        index.emplace(v.pieces[id], static_cast<TokenId>(id));
      }
    }
    std::vector<float> distinct;
    for (std::size_t id = 0; id < n; ++id)
      if (v.types[id] == kSpmNormal) distinct.push_back(v.scores[id]);
    std::sort(distinct.begin(), distinct.end(), std::greater<>());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    std::vector<BpeMerge> merges;
    for (std::size_t id = 0; id < n; ++id) {
      if (v.types[id] != kSpmNormal) continue;
      const std::string &p = v.pieces[id];
      const auto rank = static_cast<std::int32_t>(
          std::lower_bound(distinct.begin(), distinct.end(), v.scores[id], std::greater<>()) -
          distinct.begin());
      for (std::size_t k = utf8_seq_len(static_cast<unsigned char>(p[0])); k < p.size();
           k += utf8_seq_len(static_cast<unsigned char>(p[k]))) {
        auto a = index.find(std::string_view(p).substr(0, k));
        auto b = index.find(std::string_view(p).substr(k));
        if (a != index.end() && b != index.end())
          merges.push_back({a->second, b->second, static_cast<TokenId>(id), rank});
      }
    }
    BpeOptions o;
    o.byte_fallback = v.byte_fallback;
    o.unk = unk;
    o.fuse_unk = true;
    parts.model = std::make_unique<BpeModel>(std::move(symbols), merges, o);
  } else {
    std::vector<std::string> ps(n);
    for (std::size_t id = 0; id < n; ++id) {
      const int t = v.types[id];
      if (t == kSpmNormal || t == kSpmUserDefined || t == kSpmByte) ps[id] = v.pieces[id];
    }
    parts.model = std::make_unique<UnigramModel>(std::move(ps), v.scores, unk, v.byte_fallback);
  }

  parts.decoder.add(make_replace_decoder(std::string(kSpace), " "));
  parts.decoder.add(make_byte_fallback_decoder());
  parts.decoder.add(make_fuse_decoder());
  if (v.add_dummy_prefix) parts.decoder.add(make_strip_decoder(" ", 1, 0));

  if (valid(v.bos_id)) {
    parts.bos = v.bos_id;
    if (v.add_bos) parts.prefix.push_back(v.bos_id);
  }
  if (valid(v.eos_id)) parts.eos.push_back(v.eos_id);
  return parts;
}

}  // namespace keel::text
