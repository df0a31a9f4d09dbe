// Unigram language-model tokenization (SentencePiece "unigram", HF "Unigram"):
// the segmentation with the highest total piece score, found by Viterbi.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/model.h"

namespace keel::text {

class UnigramModel final : public Model {
 public:
  // pieces[id] / scores[id]; empty pieces are not part of the model.
  UnigramModel(std::vector<std::string> pieces, std::vector<float> scores,
               std::optional<TokenId> unk, bool byte_fallback);
  void encode_word(std::string_view word, std::vector<TokenId> &out) const override;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, TokenId, Hash, std::equal_to<>> by_piece_;
  std::vector<float> scores_;
  std::optional<TokenId> unk_;
  bool byte_fallback_;
  std::array<TokenId, 256> byte_token_{};
  std::size_t max_piece_bytes_ = 1;
  float unk_score_ = -10.0f;
};

}  // namespace keel::text
