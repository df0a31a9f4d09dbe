// Decoders: token pieces -> text (HF tokenizers' "decoder"). Each step maps the list
// of pieces to a new list, as in HF, because some steps look at neighbours (byte
// fallback runs) or at the position (the first piece's leading space).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace keel::text {

class DecoderStep {
 public:
  virtual ~DecoderStep() = default;
  virtual void apply(std::vector<std::string> &pieces) const = 0;
};

// "<0x0A>" -> 0x0A.
bool parse_byte_token(std::string_view piece, unsigned char &byte);

std::unique_ptr<DecoderStep> make_byte_level_decoder();
std::unique_ptr<DecoderStep> make_byte_fallback_decoder();
std::unique_ptr<DecoderStep> make_replace_decoder(std::string from, std::string to);
std::unique_ptr<DecoderStep> make_fuse_decoder();
std::unique_ptr<DecoderStep> make_strip_decoder(std::string content, int start, int stop);
// prepend: 0 never, 1 first, 2 always (as in the pre-tokenizer).
std::unique_ptr<DecoderStep> make_metaspace_decoder(std::string replacement, int prepend);
std::unique_ptr<DecoderStep> make_wordpiece_decoder(std::string prefix, bool cleanup);

class Decoder {
 public:
  bool empty() const { return steps_.empty(); }
  void add(std::unique_ptr<DecoderStep> s) { steps_.push_back(std::move(s)); }
  // The decoded bytes; may be invalid UTF-8 (byte tokens): callers sanitize.
  std::string decode(std::vector<std::string> pieces) const {
    for (const auto &s : steps_) s->apply(pieces);
    std::string out;
    for (const auto &p : pieces) out += p;
    return out;
  }

 private:
  std::vector<std::unique_ptr<DecoderStep>> steps_;
};

}  // namespace keel::text
