// A tool call's arguments object, re-serialised as it is generated: bytes of the JSON
// value the model writes go in, the compact canonical form comes out as far as it is
// settled, so that a stream can pass the arguments on while the model writes them.
//
// The canonical form is what nlohmann's dump(-1) writes for the parsed value (the form
// whole calls have always had): no whitespace outside strings, strings re-escaped
// (\" \\ \b \f \n \r \t, other control characters \u00xx, "\/" as "/", every other
// \uXXXX as its UTF-8), numbers as the parser reads and writes them (1E2 -> 100.0).
// It is built token by token, so it equals dump(parse(text)) for every valid value
// except one with a repeated key (kept as written here; the parser keeps one).
// Held back until settled: a number until the byte after it, an escape until complete
// (a surrogate pair until its second half). Invalid JSON is passed through as it comes
// (the call it belongs to fails to parse; the caller decides what that means).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace keel {

class JsonArgsStream {
 public:
  // Feeds the value's next bytes; returns how many were taken: all of them, or fewer
  // once the value ended (the bytes after it are not its own). Appends what is settled
  // to the output.
  std::size_t feed(std::string_view bytes);
  // The value's closing bracket was read.
  bool done() const { return done_; }
  // Everything settled so far (all of it once done()).
  const std::string &output() const { return out_; }
  // The output appended since the last call.
  std::string take_new();

 private:
  void flush_number();
  void put_code_point(unsigned cp);
  void escape_char(char c);

  std::string out_;
  std::size_t taken_ = 0;  // out_ bytes already returned by take_new
  std::string number_;     // a number's bytes, until the byte after it
  std::string escape_;     // an escape's bytes after the backslash, until complete
  unsigned high_surrogate_ = 0;
  int depth_ = 0;
  bool in_string_ = false, in_escape_ = false, done_ = false;
};

}  // namespace keel
