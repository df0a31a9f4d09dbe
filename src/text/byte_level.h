// GPT-2's byte-level alphabet: every byte maps to a printable code point so that
// byte-level BPE vocabularies can be stored as text ("Ġ" is the space byte).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace keel::text {

// The code point that stands for byte b.
char32_t byte_to_unicode(unsigned char b);

// The byte a code point stands for, or nullopt when it is not in the alphabet.
std::optional<unsigned char> unicode_to_byte(char32_t cp);

// Maps a byte-level string back to bytes. When some character is not in the
// alphabet (added tokens such as "<|im_start|>\n"), returns the text unchanged,
// as HF's ByteLevel decoder does.
std::string byte_level_decode(std::string_view text);

// Maps raw bytes to their byte-level string.
std::string byte_level_encode(std::string_view bytes);

}  // namespace keel::text
