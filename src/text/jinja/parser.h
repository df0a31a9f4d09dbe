// Parses the token stream of a template into statements, following jinja2's grammar
// and operator precedence. Statements keel does not implement (include, extends,
// import, recursive loops...) are errors naming the template line.
#pragma once

#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace keel::jinja {

// Throws keel::Error(kInvalidArgument or kUnsupported) naming line and column.
Body parse(std::vector<Token> tokens);

}  // namespace keel::jinja
