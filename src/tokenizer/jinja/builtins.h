// Built-in filters, tests, methods and globals of the Jinja interpreter.
#pragma once

#include <string_view>

#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);

// Each fails with RenderFailure when the value or the arguments do not fit.
Value apply_filter(std::string_view name, const Value& operand, CallArgs& args);
bool apply_test(std::string_view name, const Value& operand, CallArgs& args);
// Methods of strings, lists and dicts: `text.strip()`, `d.items()`.
Value call_method(const Value& object, std::string_view name, CallArgs& args);

// range, namespace, dict, raise_exception, strftime_now.
void define_globals(Scope& scope);

}  // namespace pagoda::jinja
