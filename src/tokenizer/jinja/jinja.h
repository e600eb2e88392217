// A Jinja template interpreter for chat templates. It renders the way Hugging Face tooling does:
// trim_blocks and lstrip_blocks on, loop controls enabled, `{% generation %}` tags ignored. Where
// Jinja and the reference JavaScript renderer (@huggingface/jinja) differ, it follows the latter;
// what the latter lacks (filters such as select, argument forms, string methods) follows Jinja.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

namespace jinja {
struct Stmt;
}  // namespace jinja

class JinjaTemplate {
 public:
  // Parses `source`. Throws Error naming the line and the construct for malformed templates and
  // for anything unsupported (an unknown statement, filter or test).
  static JinjaTemplate parse(std::string_view source);

  // Renders with the members of `context` (a JSON object: messages, add_generation_prompt,
  // bos_token, ...) as variables. Throws Error naming the line for runtime failures; for
  // raise_exception(msg) the message contains msg. Safe to call concurrently.
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  explicit JinjaTemplate(std::shared_ptr<const std::vector<jinja::Stmt>> program);

  std::shared_ptr<const std::vector<jinja::Stmt>> program_;  // immutable once parsed
};

}  // namespace pagoda
