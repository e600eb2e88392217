#include "tokenizer/jinja/ops.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "tokenizer/jinja/helpers.h"
#include "tokenizer/jinja/text.h"

namespace pagoda::jinja {
namespace {

// Longest string `*` may build; templates never need more and it bounds memory.
constexpr size_t kMaxRepeatBytes = size_t{1} << 24;

const char* symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAnd:
      return "and";
    case BinaryOp::kOr:
      return "or";
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSubtract:
      return "-";
    case BinaryOp::kConcat:
      return "~";
    case BinaryOp::kMultiply:
      return "*";
    case BinaryOp::kDivide:
      return "/";
    case BinaryOp::kFloorDivide:
      return "//";
    case BinaryOp::kModulo:
      return "%";
    case BinaryOp::kPower:
      return "**";
    case BinaryOp::kEqual:
      return "==";
    case BinaryOp::kNotEqual:
      return "!=";
    case BinaryOp::kLess:
      return "<";
    case BinaryOp::kLessEqual:
      return "<=";
    case BinaryOp::kGreater:
      return ">";
    case BinaryOp::kGreaterEqual:
      return ">=";
    case BinaryOp::kIn:
      return "in";
    case BinaryOp::kNotIn:
      return "not in";
  }
  return "?";
}

bool is_ordering(BinaryOp op) {
  return op == BinaryOp::kLess || op == BinaryOp::kLessEqual || op == BinaryOp::kGreater ||
         op == BinaryOp::kGreaterEqual;
}

// Booleans take part in arithmetic as 0 and 1.
int64_t to_int(const Value& v) {
  return v.is_int() ? v.as_int() : static_cast<int64_t>(v.as_bool());
}

Value ordering_result(BinaryOp op, int c) {
  switch (op) {
    case BinaryOp::kLess:
      return Value::boolean(c < 0);
    case BinaryOp::kLessEqual:
      return Value::boolean(c <= 0);
    case BinaryOp::kGreater:
      return Value::boolean(c > 0);
    default:
      return Value::boolean(c >= 0);
  }
}

Value power(const Value& left, const Value& right) {
  const double a = left.as_double(), b = right.as_double();
  if (a == 0 && b < 0) fail_render("0 cannot be raised to a negative power");
  if (!left.is_float() && !right.is_float() && b >= 0) {
    int64_t base = to_int(left), exponent = to_int(right), result = 1;
    while (exponent > 0) {
      if ((exponent & 1) && __builtin_mul_overflow(result, base, &result)) {
        fail_render("integer overflow in '**'");
      }
      exponent >>= 1;
      if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) {
        fail_render("integer overflow in '**'");
      }
    }
    return Value::integer(result);
  }
  const double result = std::pow(a, b);
  if (!std::isfinite(result)) fail_render("'**' result is not a finite real number");
  return Value::number(result);
}

Value integer_op(BinaryOp op, int64_t a, int64_t b) {
  int64_t result = 0;
  bool overflow = false;
  switch (op) {
    case BinaryOp::kAdd:
      overflow = __builtin_add_overflow(a, b, &result);
      break;
    case BinaryOp::kSubtract:
      overflow = __builtin_sub_overflow(a, b, &result);
      break;
    case BinaryOp::kMultiply:
      overflow = __builtin_mul_overflow(a, b, &result);
      break;
    case BinaryOp::kDivide:
      if (b == 0) fail_render("division by zero");
      return Value::number(static_cast<double>(a) / static_cast<double>(b));
    case BinaryOp::kFloorDivide:
      if (b == 0) fail_render("division by zero");
      if (a == INT64_MIN && b == -1) fail_render("integer overflow in '//'");
      result = a / b;
      if (a % b != 0 && ((a < 0) != (b < 0))) --result;
      break;
    case BinaryOp::kModulo:
      if (b == 0) fail_render("modulo by zero");
      // The remainder takes the sign of the dividend, as in the reference renderer.
      result = b == -1 ? 0 : a % b;
      break;
    default:
      return ordering_result(op, a < b ? -1 : a > b);
  }
  if (overflow) fail_render("integer overflow in '{}'", symbol(op));
  return Value::integer(result);
}

Value float_op(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd:
      return Value::number(a + b);
    case BinaryOp::kSubtract:
      return Value::number(a - b);
    case BinaryOp::kMultiply:
      return Value::number(a * b);
    case BinaryOp::kDivide:
      if (b == 0) fail_render("division by zero");
      return Value::number(a / b);
    case BinaryOp::kFloorDivide:
      if (b == 0) fail_render("division by zero");
      return Value::number(std::floor(a / b));
    case BinaryOp::kModulo:
      if (b == 0) fail_render("modulo by zero");
      return Value::number(std::fmod(a, b));
    case BinaryOp::kLess:
      return Value::boolean(a < b);
    case BinaryOp::kLessEqual:
      return Value::boolean(a <= b);
    case BinaryOp::kGreater:
      return Value::boolean(a > b);
    default:
      return Value::boolean(a >= b);
  }
}

// a + b, charged before it is built: a string doubled in a loop fails at the budget rather than
// at the allocator.
Value concat(const std::string& a, const std::string& b) {
  charge_work(a.size() + b.size());
  return Value::charged_string(a + b);
}

Value repeat(const std::string& text, int64_t count) {
  if (count <= 0 || text.empty()) return Value::string("");
  if (text.size() * static_cast<uint64_t>(count) > kMaxRepeatBytes) {
    fail_render("string repetition would exceed {} bytes", kMaxRepeatBytes);
  }
  std::string out;
  out.reserve(text.size() * count);
  for (int64_t i = 0; i < count; ++i)
    out += text;
  return Value::string(std::move(out));
}

}  // namespace

Value binary_op(BinaryOp op, const Value& left, const Value& right) {
  switch (op) {
    case BinaryOp::kEqual:
      return Value::boolean(loose_equals(left, right));
    case BinaryOp::kNotEqual:
      return Value::boolean(!loose_equals(left, right));
    case BinaryOp::kIn:
      return Value::boolean(contains(right, left));
    case BinaryOp::kNotIn:
      return Value::boolean(!contains(right, left));
    default:
      break;
  }
  if (left.is_undefined() || right.is_undefined()) {
    fail_render("cannot apply '{}' to an undefined value", symbol(op));
  }
  if (left.is_none() || right.is_none()) fail_render("cannot apply '{}' to none", symbol(op));
  if (op == BinaryOp::kConcat) return concat(to_concat_string(left), to_concat_string(right));
  if (left.is_numeric() && right.is_numeric()) {
    if (op == BinaryOp::kPower) return power(left, right);
    if (left.is_float() || right.is_float())
      return float_op(op, left.as_double(), right.as_double());
    return integer_op(op, to_int(left), to_int(right));
  }
  if (op == BinaryOp::kAdd && left.is_array() && right.is_array()) {
    Array items = left.as_array();
    items.insert(items.end(), right.as_array().begin(), right.as_array().end());
    return Value::array(std::move(items));
  }
  // `+` concatenates as soon as one side is a string, as in the reference renderer.
  if (op == BinaryOp::kAdd && (left.is_string() || right.is_string())) {
    return concat(to_concat_string(left), to_concat_string(right));
  }
  if (op == BinaryOp::kMultiply && left.is_string() && right.is_int()) {
    return repeat(left.as_string(), right.as_int());
  }
  if (op == BinaryOp::kMultiply && left.is_int() && right.is_string()) {
    return repeat(right.as_string(), left.as_int());
  }
  if (is_ordering(op) && left.is_string() && right.is_string()) {
    return ordering_result(op, left.as_string().compare(right.as_string()));
  }
  fail_render("unsupported operand types for '{}': {} and {}", symbol(op), type_name(left),
              type_name(right));
}

Value unary_op(UnaryOp op, const Value& operand) {
  if (op == UnaryOp::kNot) return Value::boolean(!truthy(operand));
  if (!operand.is_numeric()) {
    fail_render("bad operand type for unary '{}': {}", op == UnaryOp::kNegate ? "-" : "+",
                type_name(operand));
  }
  if (operand.is_float())
    return Value::number(op == UnaryOp::kNegate ? -operand.as_float() : operand.as_float());
  const int64_t value = to_int(operand);
  if (op == UnaryOp::kPlus) return Value::integer(value);
  if (value == INT64_MIN) fail_render("integer overflow in unary '-'");
  return Value::integer(-value);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (item.is_undefined())
    fail_render("cannot test whether an undefined value is in a {}", type_name(container));
  if (container.is_array()) {
    const Array& items = container.as_array();
    charge_work(items.size());
    return std::any_of(items.begin(), items.end(),
                       [&](const Value& v) { return strict_equals(v, item); });
  }
  if ((container.is_string() || container.is_object()) && !item.is_string()) {
    fail_render("'in {}' requires a string on the left, got {}", type_name(container),
                type_name(item));
  }
  if (container.is_string()) {
    charge_work(container.as_string().size());
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_object()) return find_member(container.as_object(), item.as_string()) != nullptr;
  fail_render("cannot test membership in {}", type_name(container));
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_array() || object.is_string()) {
    if (key.is_string()) {
      // `.length` of lists and strings, which the reference renderer exposes.
      if (key.as_string() != "length") return Value();
      return Value::integer(static_cast<int64_t>(
          object.is_array() ? object.as_array().size() : count_code_points(object.as_string())));
    }
    if (!key.is_int()) fail_render("cannot index {} with {}", type_name(object), type_name(key));
    if (object.is_array()) {
      const Array& items = object.as_array();
      const int64_t size = static_cast<int64_t>(items.size());
      const int64_t index = key.as_int() < 0 ? key.as_int() + size : key.as_int();
      return index >= 0 && index < size ? items[index] : Value();
    }
    const CodePoints chars(object.as_string());
    const int64_t size = chars.size();
    const int64_t index = key.as_int() < 0 ? key.as_int() + size : key.as_int();
    return index >= 0 && index < size ? Value::string(std::string(chars.at(index))) : Value();
  }
  if (!key.is_string()) fail_render("cannot index {} with {}", type_name(object), type_name(key));
  const Value* member = object.find(key.as_string());
  return member != nullptr ? *member : Value();
}

Value slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int()) fail_render("slice {} must be an integer, got {}", what, type_name(v));
    return v.as_int();
  };
  if (!object.is_array() && !object.is_string()) fail_render("cannot slice {}", type_name(object));
  const std::optional<int64_t> first = bound(start, "start"), last = bound(stop, "stop");
  const int64_t stride = bound(step, "step").value_or(1);
  if (stride == 0) fail_render("slice step cannot be zero");

  std::optional<CodePoints> chars;
  if (object.is_string()) chars.emplace(object.as_string());
  const int64_t size =
      object.is_array() ? static_cast<int64_t>(object.as_array().size()) : chars->size();
  // Python's slice index adjustment.
  auto adjust = [&](std::optional<int64_t> index, int64_t absent) {
    if (!index) return absent;
    int64_t i = *index < 0 ? *index + size : *index;
    return stride > 0 ? std::clamp<int64_t>(i, 0, size) : std::clamp<int64_t>(i, -1, size - 1);
  };
  const int64_t from = adjust(first, stride > 0 ? 0 : size - 1);
  const int64_t to = adjust(last, stride > 0 ? size : -1);
  // A string's forward run is one piece of it.
  if (chars && stride == 1)
    return Value::string(std::string(chars->span(from, std::max(from, to))));

  Array items;
  std::string text;
  for (int64_t i = from; stride > 0 ? i < to : i > to;) {
    if (object.is_array()) {
      items.push_back(object.as_array()[i]);
    } else {
      text.append(chars->at(i));  // at most the text: Value::string charges it
    }
    if (__builtin_add_overflow(i, stride, &i)) break;
  }
  return object.is_array() ? Value::array(std::move(items)) : Value::string(std::move(text));
}

}  // namespace pagoda::jinja
