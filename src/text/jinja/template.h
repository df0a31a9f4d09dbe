// A parsed Jinja2 template, rendered the way HF transformers renders chat templates:
// jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// loopcontrols extension ({% break %}, {% continue %}), {% generation %} blocks, the
// raise_exception() and strftime_now() globals, and tojson as json.dumps with
// ensure_ascii=False. Anything else jinja2 accepts but keel does not implement is an
// Error(kUnsupported) naming the template line; a template that raises or misuses
// types fails with Error(kInvalidArgument) naming the line.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "text/jinja/ast.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/value.h"

namespace keel::jinja {

struct RenderOptions {
  RenderLimits limits;
  // The instant strftime_now() reports, as local broken-down time; unset: the clock.
  std::optional<std::tm> now;
};

class Template {
 public:
  // Parses the source; throws keel::Error naming the line of a syntax error.
  explicit Template(std::string_view source);

  // `context` is a dict of the template's variables. Thread-safe: a Template holds no
  // render state, so one parsed template can render for many requests at once.
  std::string render(const Value &context, const RenderOptions &options = {}) const;

 private:
  Body body_;
};

}  // namespace keel::jinja
