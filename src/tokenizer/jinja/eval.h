// Renders a parsed template: variable scopes, statements and expression evaluation.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <unordered_map>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

// A frame of variables. for loops, macro calls and call blocks open one; if and set do not.
class Scope {
 public:
  explicit Scope(Scope* parent = nullptr) : parent_(parent) {}

  // Undefined when no enclosing frame has the name.
  Value lookup(const std::string& name) const;
  void set(const std::string& name, Value value) { variables_[name] = std::move(value); }

 private:
  Scope* parent_;
  std::unordered_map<std::string, Value> variables_;
};

// Renders `program` with the members of `context` as variables. Throws Error naming the line for
// runtime failures, including raise_exception().
std::string render_program(const Body& program, const nlohmann::ordered_json& context);

}  // namespace pagoda::jinja
