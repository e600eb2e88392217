#include "tokenizer/jinja/jinja.h"

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/eval.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace pagoda {

JinjaTemplate::JinjaTemplate(std::shared_ptr<const std::vector<jinja::Stmt>> program)
    : program_(std::move(program)) {}

JinjaTemplate JinjaTemplate::parse(std::string_view source) {
  return JinjaTemplate(
      std::make_shared<const jinja::Body>(jinja::parse_tokens(jinja::tokenize(source))));
}

std::string JinjaTemplate::render(const nlohmann::ordered_json& context) const {
  return jinja::render_program(*program_, context);
}

}  // namespace pagoda
