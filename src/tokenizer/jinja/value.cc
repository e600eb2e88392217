#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/text.h"

namespace pagoda::jinja {

double Value::as_double() const {
  switch (kind()) {
    case Kind::kBool:
      return as_bool() ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(as_int());
    default:
      return as_float();
  }
}

const Value* Value::find(std::string_view key) const {
  if (is_object()) return find_member(as_object(), key);
  if (is(Kind::kNamespace)) return find_member(as_namespace().attributes, key);
  return nullptr;
}

namespace {

// The budget of the render this thread runs, if any.
thread_local RenderBudget* current_budget = nullptr;

// 1 + the deepest of `items` (through `value_of`), checked against kMaxValueDepth.
template <typename Items, typename ValueOf>
int nested_depth(const Items& items, ValueOf&& value_of, const char* what) {
  int deepest = 0;
  for (const auto& item : items)
    deepest = std::max(deepest, value_of(item).depth());
  if (deepest >= kMaxValueDepth) fail_render("{} nest deeper than {} levels", what, kMaxValueDepth);
  return deepest + 1;
}

}  // namespace

void charge_work(uint64_t units) {
  RenderBudget* budget = current_budget;
  if (budget == nullptr) return;
  if (units > budget->left_) {
    budget->left_ = 0;
    fail_render("the template does more work than a render may (runaway loops or values)");
  }
  budget->left_ -= units;
}

RenderBudget::RenderBudget(uint64_t limit) : left_(limit), previous_(current_budget) {
  current_budget = this;
}

RenderBudget::~RenderBudget() {
  current_budget = previous_;
}

Value Value::array(Array a) {
  charge_work(a.size() * kItemWork);
  return charged_array(std::move(a));
}

Value Value::charged_array(Array a) {
  const int depth = nested_depth(
      a, [](const Value& v) -> const Value& { return v; }, "lists");
  return make<ArrayPtr>(std::make_shared<const Nested<Array>>(Nested<Array>{std::move(a), depth}));
}

Value Value::object(Object o) {
  charge_work(o.size() * kMemberWork);
  const int depth = nested_depth(
      o, [](const std::pair<std::string, Value>& m) -> const Value& { return m.second; }, "dicts");
  return make<ObjectPtr>(
      std::make_shared<const Nested<Object>>(Nested<Object>{std::move(o), depth}));
}

int Value::depth() const {
  if (is_array()) return std::get<ArrayPtr>(data_)->depth;
  if (is_object()) return std::get<ObjectPtr>(data_)->depth;
  return 0;
}

const void* Value::identity() const {
  if (is(Kind::kNamespace)) return std::get<NamespacePtr>(data_).get();
  if (is(Kind::kFunction)) return std::get<FunctionPtr>(data_).get();
  return nullptr;
}

const Value* find_member(const Object& object, std::string_view key) {
  charge_work(object.size());  // a scan: a long dict looked up in a loop is work
  for (const auto& [name, value] : object) {
    if (name == key) return &value;
  }
  return nullptr;
}

void set_member(Object& object, std::string_view key, Value value) {
  charge_work(object.size());  // a scan, as find_member's
  for (auto& [name, member] : object) {
    if (name == key) {
      member = std::move(value);
      return;
    }
  }
  object.emplace_back(std::string(key), std::move(value));
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "undefined";
    case Value::Kind::kNone:
      return "none";
    case Value::Kind::kBool:
      return "boolean";
    case Value::Kind::kInt:
      return "integer";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "string";
    case Value::Kind::kArray:
      return "list";
    case Value::Kind::kObject:
      return "dict";
    case Value::Kind::kNamespace:
      return "namespace";
    case Value::Kind::kFunction:
      return "function";
  }
  return "value";
}

Value from_json(const nlohmann::ordered_json& json) {
  using Type = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case Type::null:
      return Value::none();
    case Type::boolean:
      return Value::boolean(json.get<bool>());
    case Type::number_integer:
      return Value::integer(json.get<int64_t>());
    case Type::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case Type::number_float: {
      const double d = json.get<double>();
      if (d == std::trunc(d) && std::fabs(d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(d));
      return Value::number(d);
    }
    case Type::string:
      return Value::string(json.get<std::string>());
    case Type::array: {
      Array items;
      items.reserve(json.size());
      for (const auto& item : json)
        items.push_back(from_json(item));
      return Value::array(std::move(items));
    }
    case Type::object: {
      Object members;
      members.reserve(json.size());
      for (const auto& [key, item] : json.items())
        members.emplace_back(key, from_json(item));
      return Value::object(std::move(members));
    }
    default:
      fail_render("unsupported JSON value of type {}", json.type_name());
  }
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0 && !std::isnan(v.as_float());
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kArray:
      return !v.as_array().empty();
    case Value::Kind::kObject:
      return !v.as_object().empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction:
      return true;
  }
  return false;
}

namespace {

bool numbers_equal(const Value& a, const Value& b) {
  if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
  return a.as_double() == b.as_double();
}

bool equals(const Value& a, const Value& b, bool loose) {
  const bool a_nullish = a.is_none() || a.is_undefined();
  const bool b_nullish = b.is_none() || b.is_undefined();
  if (loose && (a_nullish || b_nullish)) return a_nullish && b_nullish;
  if (loose ? a.is_numeric() && b.is_numeric() : a.is_number() && b.is_number()) {
    return numbers_equal(a, b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kBool:
      return a.as_bool() == b.as_bool();
    case Value::Kind::kString:
      charge_work(std::min(a.as_string().size(), b.as_string().size()));
      return a.as_string() == b.as_string();
    case Value::Kind::kArray:
      charge_work(std::min(a.as_array().size(), b.as_array().size()));
      return std::equal(a.as_array().begin(), a.as_array().end(), b.as_array().begin(),
                        b.as_array().end(),
                        [&](const Value& x, const Value& y) { return equals(x, y, loose); });
    case Value::Kind::kObject: {
      if (a.as_object().size() != b.as_object().size()) return false;
      charge_work(a.as_object().size() * a.as_object().size());  // a lookup a member
      for (const auto& [key, value] : a.as_object()) {
        const Value* other = find_member(b.as_object(), key);
        if (other == nullptr || !equals(value, *other, loose)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

}  // namespace

bool loose_equals(const Value& a, const Value& b) {
  return equals(a, b, /*loose=*/true);
}
bool strict_equals(const Value& a, const Value& b) {
  return equals(a, b, /*loose=*/false);
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if ((a.is_none() && b.is_none()) || (a.is_undefined() && b.is_undefined())) return 0;
  if (a.is_numeric() && b.is_numeric()) {
    const double x = a.as_double(), y = b.as_double();
    if (std::isnan(x) || std::isnan(y)) fail_render("cannot order NaN");
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) {
    const int c = case_sensitive ? a.as_string().compare(b.as_string())
                                 : ascii_lower(a.as_string()).compare(ascii_lower(b.as_string()));
    return c < 0 ? -1 : c > 0;
  }
  fail_render("cannot compare {} with {}", type_name(a), type_name(b));
}

namespace {

// A float as the reference renderer prints it: whole numbers keep a ".0".
std::string format_float(double d) {
  if (d == 0 && std::signbit(d)) return "-0.0";
  if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 1e21)
    return fmt::format("{:.1f}", d);
  return format_js_number(d);
}

// The reference renderer's toString() of a value; none and undefined spell themselves.
std::string print_string(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "undefined";
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
      return v.as_bool() ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return format_float(v.as_float());
    case Value::Kind::kString:
      return v.as_string();
    case Value::Kind::kFunction:
      fail_render("cannot print function '{}'", v.as_function().name);
    default: {
      JsonOptions options;
      options.undefined_as_null = false;
      return to_json(v, options);
    }
  }
}

}  // namespace

std::string to_output(const Value& v) {
  return v.is_none() || v.is_undefined() ? std::string() : print_string(v);
}

std::string to_concat_string(const Value& v) {
  if (v.is_float()) return format_js_number(v.as_float());
  if (v.is_array()) {
    std::string out;
    for (const Value& item : v.as_array()) {
      if (&item != &v.as_array().front()) out += ',';
      out += print_string(item);
    }
    return out;
  }
  return print_string(v);
}

namespace {

// Appends `v` as JSON to `out`, every byte charged as it is appended: nested values are written in
// place, never built as strings and copied into their parent's.
void write_json(const Value& v, const JsonOptions& options, int depth, std::string& out) {
  if (depth > kMaxValueDepth) {
    fail_render("a value nests deeper than {} levels (a namespace that holds itself?)",
                kMaxValueDepth);
  }
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return append_charged(out, options.undefined_as_null ? "null" : "undefined");
    case Value::Kind::kNone:
      return append_charged(out, "null");
    case Value::Kind::kBool:
      return append_charged(out, v.as_bool() ? "true" : "false");
    case Value::Kind::kInt:
      return append_charged(out, std::to_string(v.as_int()));
    case Value::Kind::kFloat:
      return append_charged(out,
                            std::isfinite(v.as_float()) ? format_js_number(v.as_float()) : "null");
    case Value::Kind::kString:
      return append_charged(out, json_quote(v.as_string(), options.ensure_ascii));
    case Value::Kind::kFunction:
      fail_render("cannot convert function '{}' to JSON", v.as_function().name);
    default:
      break;
  }
  const int indent = options.indent.value_or(0);
  if (indent < 0) fail_render("tojson indent must not be negative, got {}", indent);
  // Not a structured binding: the lambdas below capture the item separator.
  const std::pair<std::string, std::string> separators =
      options.separators.value_or(std::pair<std::string, std::string>(indent ? "," : ", ", ": "));
  const std::string& item_separator = separators.first;
  const std::string& key_separator = separators.second;
  // A line break and the padding of `level`, where there is an indent.
  const auto new_line = [&](int level) {
    if (!indent) return;
    const size_t width = static_cast<size_t>(indent) * static_cast<size_t>(level);
    charge_work(1 + width);
    out += '\n';
    out.append(width, ' ');
  };
  bool first = true;
  const auto next_item = [&] {
    if (!first) append_charged(out, item_separator);
    first = false;
    new_line(depth + 1);
  };
  const bool is_array = v.is_array();
  append_charged(out, is_array ? "[" : "{");
  if (is_array) {
    for (const Value& item : v.as_array()) {
      next_item();
      write_json(item, options, depth + 1, out);
    }
  } else {
    const Object& object = v.is_object() ? v.as_object() : v.as_namespace().attributes;
    std::vector<const Object::value_type*> members;
    members.reserve(object.size());
    for (const auto& member : object)
      members.push_back(&member);
    if (options.sort_keys) {
      std::stable_sort(members.begin(), members.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    for (const auto* member : members) {
      next_item();
      append_charged(out, json_quote(member->first, options.ensure_ascii));
      append_charged(out, key_separator);
      write_json(member->second, options, depth + 1, out);
    }
  }
  if (!first) new_line(depth);
  append_charged(out, is_array ? "]" : "}");
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  write_json(v, options, 0, out);
  return out;
}

}  // namespace pagoda::jinja
