// Builds the syntax tree of a template from its tokens: text, output tags and statements, with
// expressions parsed by jinja_expr_parser.h.
#pragma once

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace pagoda::jinja {

// Throws Error naming the line and the construct for malformed or unsupported templates:
// unknown statements, filters and tests, unclosed blocks, break outside a loop.
Body parse_tokens(std::vector<Token> tokens);

}  // namespace pagoda::jinja
