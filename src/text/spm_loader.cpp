// Tokenizer::from_spm: SentencePiece's ModelProto, parsed by hand (no protobuf
// dependency). Only the fields keel needs are read; every length is checked
// against the bytes that remain.
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "text/bpe_model.h"
#include "text/loaders.h"
#include "text/spm_pipeline.h"
#include "text/unigram_model.h"

namespace keel {

namespace {

class ProtoReader {
 public:
  ProtoReader(std::string_view b, const std::string &origin) : b_(b), origin_(origin) {}
  bool done() const { return pos_ >= b_.size(); }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= b_.size()) fail("truncated varint");
      const auto byte = static_cast<unsigned char>(b_[pos_++]);
      v |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return v;
    }
    fail("varint too long");
  }
  std::string_view bytes() {
    const std::uint64_t n = varint();
    if (n > b_.size() - pos_) fail("length past the end");
    std::string_view s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::uint32_t fixed32() {
    if (b_.size() - pos_ < 4) fail("truncated fixed32");
    std::uint32_t v;
    std::memcpy(&v, b_.data() + pos_, 4);
    pos_ += 4;
    return v;
  }
  void skip(int wire) {
    switch (wire) {
      case 0:
        varint();
        break;
      case 1:
        if (b_.size() - pos_ < 8) fail("truncated fixed64");
        pos_ += 8;
        break;
      case 2:
        bytes();
        break;
      case 5:
        fixed32();
        break;
      default:
        fail("unknown wire type " + std::to_string(wire));
    }
  }
  [[noreturn]] void fail(const std::string &why) const {
    throw Error(ErrorCode::kFormat, origin_ + ": SentencePiece model: " + why);
  }

 private:
  std::string_view b_;
  std::size_t pos_ = 0;
  const std::string &origin_;
};

}  // namespace

text::TokenizerParts text::parts_from_spm(std::string_view data, const std::string &origin) {
  text::SpmVocab v;
  int model_type = 1;  // UNIGRAM unless the trainer spec says otherwise
  ProtoReader r(data, origin);
  while (!r.done()) {
    const std::uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (field == 1 && wire == 2) {  // SentencePiece
      ProtoReader p(r.bytes(), origin);
      std::string piece;
      float score = 0;
      int type = 1;
      while (!p.done()) {
        const std::uint64_t k = p.varint();
        const int f = static_cast<int>(k >> 3), w = static_cast<int>(k & 7);
        if (f == 1 && w == 2) {
          piece = std::string(p.bytes());
        } else if (f == 2 && w == 5) {
          const std::uint32_t bits = p.fixed32();
          std::memcpy(&score, &bits, 4);
        } else if (f == 3 && w == 0) {
          type = static_cast<int>(p.varint());
        } else {
          p.skip(w);
        }
      }
      if (v.pieces.size() >= (1u << 22)) r.fail("too many pieces");
      v.pieces.push_back(std::move(piece));
      v.scores.push_back(score);
      v.types.push_back(type);
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      ProtoReader t(r.bytes(), origin);
      while (!t.done()) {
        const std::uint64_t k = t.varint();
        const int f = static_cast<int>(k >> 3), w = static_cast<int>(k & 7);
        if (w != 0) {
          t.skip(w);
          continue;
        }
        const auto val = static_cast<std::int64_t>(t.varint());
        if (f == 3)
          model_type = static_cast<int>(val);
        else if (f == 35)
          v.byte_fallback = val != 0;
        else if (f == 40)
          v.unk_id = static_cast<std::int32_t>(val);
        else if (f == 41)
          v.bos_id = static_cast<std::int32_t>(val);
        else if (f == 42)
          v.eos_id = static_cast<std::int32_t>(val);
      }
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      ProtoReader n(r.bytes(), origin);
      while (!n.done()) {
        const std::uint64_t k = n.varint();
        const int f = static_cast<int>(k >> 3), w = static_cast<int>(k & 7);
        if (f == 1 && w == 2) {
          v.normalizer_name = std::string(n.bytes());
        } else if (f == 2 && w == 2) {
          v.has_charsmap = !n.bytes().empty();
        } else if (f == 3 && w == 0) {
          v.add_dummy_prefix = n.varint() != 0;
        } else if (f == 4 && w == 0) {
          v.remove_extra_whitespaces = n.varint() != 0;
        } else {
          n.skip(w);
        }
      }
    } else {
      r.skip(wire);
    }
  }
  if (v.pieces.empty()) r.fail("no pieces");
  if (model_type != 1 && model_type != 2)
    throw Error(ErrorCode::kUnsupported, origin + ": SentencePiece model type " +
                                             std::to_string(model_type) +
                                             " (only unigram and BPE are supported)");
  v.bpe = model_type == 2;
  v.origin = origin;
  return text::build_spm_parts(std::move(v));
}

}  // namespace keel
