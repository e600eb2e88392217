// Operators, member access and slicing on runtime values.
#pragma once

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

// All binary operators but `and`/`or`, which the interpreter short-circuits.
Value binary_op(BinaryOp op, const Value& left, const Value& right);
Value unary_op(UnaryOp op, const Value& operand);
// `item in container`.
bool contains(const Value& container, const Value& item);

// `object.key` and `object[key]`: missing members are undefined; integer keys index lists and
// strings from either end.
Value get_item(const Value& object, const Value& key);
// Python slicing of lists and strings; undefined or none bounds are absent.
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step);

}  // namespace pagoda::jinja
