// The pipeline of a SentencePiece vocabulary (from a .model file or a GGUF "llama"
// vocabulary): spaces become "▁", a dummy "▁" prefix, BPE by piece score or unigram,
// byte fallback, and the matching decoder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer_parts.h"

namespace keel::text {

// SentencePiece piece types.
enum SpmPieceType {
  kSpmNormal = 1,
  kSpmUnknown = 2,
  kSpmControl = 3,
  kSpmUserDefined = 4,
  kSpmUnused = 5,
  kSpmByte = 6
};

struct SpmVocab {
  std::string origin;
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int> types;
  bool bpe = true;
  bool byte_fallback = false;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = false;
  std::string normalizer_name;
  bool has_charsmap = false;
  std::int32_t unk_id = 0, bos_id = 1, eos_id = 2;
  bool add_bos = true;
};

TokenizerParts build_spm_parts(SpmVocab v);

}  // namespace keel::text
