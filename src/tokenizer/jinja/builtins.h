// Built-in filters, tests, methods and globals of the Jinja interpreter.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);

// Each fails with RenderFailure when the value or the arguments do not fit.
Value apply_filter(std::string_view name, const Value& operand, CallArgs& args);
bool apply_test(std::string_view name, const Value& operand, CallArgs& args);
// Methods of strings, lists and dicts: `text.strip()`, `d.items()`.
Value call_method(const Value& object, std::string_view name, CallArgs& args);

// The namespaces one render made, kept until it ends. A namespace may hold itself or another
// that holds it (`{% set ns.self = ns %}`), a cycle that shared ownership alone never frees, and
// a chain of namespaces would free itself recursively; so at the end this empties each of them
// while all are still held, then lets them go.
class RenderNamespaces {
 public:
  RenderNamespaces() = default;
  RenderNamespaces(const RenderNamespaces&) = delete;
  RenderNamespaces& operator=(const RenderNamespaces&) = delete;
  ~RenderNamespaces();
  Value make(Object attributes);

 private:
  std::vector<std::shared_ptr<Namespace>> made_;
};

// range, namespace (made in `namespaces`), dict, raise_exception, strftime_now.
void define_globals(Scope& scope, RenderNamespaces& namespaces);

}  // namespace pagoda::jinja
