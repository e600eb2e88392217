// Built-in tests, methods and globals. Where the reference JavaScript renderer implements one,
// its behaviour is matched; the rest follow Jinja's and Python's documentation.
#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <memory>
#include <unordered_map>

#include "tokenizer/jinja/eval.h"
#include "tokenizer/jinja/helpers.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/text.h"

namespace pagoda::jinja {
namespace {

// range() beyond this many items is refused; templates count messages, not millions.
constexpr int64_t kMaxRangeLength = 1'000'000;

// ---- Tests ----

struct TestDef {
  bool (*check)(const Value& v, const Value& arg);  // arg is undefined for tests without one
  bool takes_argument;
};

bool is_ordered(BinaryOp op, const Value& v, const Value& arg) {
  return truthy(binary_op(op, v, arg));
}

int64_t require_int(const char* test, const Value& v) {
  if (!v.is_int()) fail_render("test '{}' needs an integer, got {}", test, type_name(v));
  return v.as_int();
}

const std::unordered_map<std::string_view, TestDef>& test_table() {
  using V = const Value&;
  static const std::unordered_map<std::string_view, TestDef> table = {
      {"boolean", {[](V v, V) { return v.is(Value::Kind::kBool); }, false}},
      {"callable", {[](V v, V) { return v.is(Value::Kind::kFunction); }, false}},
      {"defined", {[](V v, V) { return !v.is_undefined(); }, false}},
      {"undefined", {[](V v, V) { return v.is_undefined(); }, false}},
      {"none", {[](V v, V) { return v.is_none(); }, false}},
      {"string", {[](V v, V) { return v.is_string(); }, false}},
      {"number", {[](V v, V) { return v.is_number(); }, false}},
      {"integer", {[](V v, V) { return v.is_int(); }, false}},
      {"float", {[](V v, V) { return v.is_float(); }, false}},
      {"mapping", {[](V v, V) { return v.is_object(); }, false}},
      // Dicts are not iterable here, as in the reference renderer.
      {"iterable", {[](V v, V) { return v.is_array() || v.is_string(); }, false}},
      {"sequence", {[](V v, V) { return v.is_array() || v.is_object() || v.is_string(); }, false}},
      {"true", {[](V v, V) { return v.is(Value::Kind::kBool) && v.as_bool(); }, false}},
      {"false", {[](V v, V) { return v.is(Value::Kind::kBool) && !v.as_bool(); }, false}},
      {"lower",
       {[](V v, V) { return v.is_string() && v.as_string() == ascii_lower(v.as_string()); },
        false}},
      {"upper",
       {[](V v, V) { return v.is_string() && v.as_string() == ascii_upper(v.as_string()); },
        false}},
      {"odd", {[](V v, V) { return require_int("odd", v) % 2 != 0; }, false}},
      {"even", {[](V v, V) { return require_int("even", v) % 2 == 0; }, false}},
      {"divisibleby",
       {[](V v, V n) {
          if (!v.is_numeric() || !n.is_numeric()) {
            fail_render("test 'divisibleby' needs numbers, got {} and {}", type_name(v),
                        type_name(n));
          }
          if (n.as_double() == 0) fail_render("test 'divisibleby': division by zero");
          if (v.is_int() && n.is_int()) return n.as_int() == -1 || v.as_int() % n.as_int() == 0;
          return std::fmod(v.as_double(), n.as_double()) == 0;
        },
        true}},
      {"eq", {[](V v, V arg) { return strict_equals(v, arg); }, true}},
      {"equalto", {[](V v, V arg) { return strict_equals(v, arg); }, true}},
      {"==", {[](V v, V arg) { return loose_equals(v, arg); }, true}},
      {"ne", {[](V v, V arg) { return !strict_equals(v, arg); }, true}},
      {"!=", {[](V v, V arg) { return !loose_equals(v, arg); }, true}},
      {"lt", {[](V v, V arg) { return is_ordered(BinaryOp::kLess, v, arg); }, true}},
      {"lessthan", {[](V v, V arg) { return is_ordered(BinaryOp::kLess, v, arg); }, true}},
      {"<", {[](V v, V arg) { return is_ordered(BinaryOp::kLess, v, arg); }, true}},
      {"le", {[](V v, V arg) { return is_ordered(BinaryOp::kLessEqual, v, arg); }, true}},
      {"<=", {[](V v, V arg) { return is_ordered(BinaryOp::kLessEqual, v, arg); }, true}},
      {"gt", {[](V v, V arg) { return is_ordered(BinaryOp::kGreater, v, arg); }, true}},
      {"greaterthan", {[](V v, V arg) { return is_ordered(BinaryOp::kGreater, v, arg); }, true}},
      {">", {[](V v, V arg) { return is_ordered(BinaryOp::kGreater, v, arg); }, true}},
      {"ge", {[](V v, V arg) { return is_ordered(BinaryOp::kGreaterEqual, v, arg); }, true}},
      {">=", {[](V v, V arg) { return is_ordered(BinaryOp::kGreaterEqual, v, arg); }, true}},
      {"in", {[](V v, V seq) { return contains(seq, v); }, true}},
  };
  return table;
}

// ---- Methods ----

Array split_text(std::string_view text, const std::string* separator, int64_t max_split) {
  // Each part is charged as it is added (its bytes and its place in the list), before the list
  // is whole: a long string split at every byte makes many small values. Value::charged_array
  // takes the result.
  Array parts;
  const auto add = [&](std::string_view part) {
    charge_work(kItemWork);
    parts.push_back(Value::string(std::string(part)));
  };
  auto limit_reached = [&] {
    return max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split;
  };
  if (separator == nullptr) {
    // Runs of whitespace separate, and leading or trailing whitespace yields no empty parts.
    size_t pos = js_space_length(text, 0);
    while (pos < text.size()) {
      if (limit_reached()) {
        add(text.substr(pos));
        break;
      }
      size_t end = pos;
      while (end < text.size() && js_space_length(text, end) == 0) {
        size_t length = 0;
        decode_utf8(text, end, &length);
        end += length;
      }
      add(text.substr(pos, end - pos));
      pos = end + js_space_length(text, end);
    }
    return parts;
  }
  if (separator->empty()) fail_render("split(): empty separator");
  for (size_t pos = 0;;) {
    const size_t found = limit_reached() ? std::string_view::npos : text.find(*separator, pos);
    add(text.substr(pos, found - pos));
    if (found == std::string_view::npos) return parts;
    pos = found + separator->size();
  }
}

bool affix_matches(const std::string& what, const std::string& text, const Value& affix,
                   bool prefix) {
  auto matches = [&](const Value& v) {
    if (!v.is_string())
      fail_render("{} needs a string or a list of strings, got {}", what, type_name(v));
    return prefix ? text.starts_with(v.as_string()) : text.ends_with(v.as_string());
  };
  if (!affix.is_array()) return matches(affix);
  return std::any_of(affix.as_array().begin(), affix.as_array().end(), matches);
}

// Python's str.find (a code point index, or -1) and str.count (non-overlapping).
Value find_or_count(const std::string& text, const std::string& sub, bool find) {
  if (find) {
    const size_t found = text.find(sub);
    if (found == std::string::npos) return Value::integer(-1);
    return Value::integer(static_cast<int64_t>(count_code_points(text.substr(0, found))));
  }
  if (sub.empty()) return Value::integer(static_cast<int64_t>(count_code_points(text)) + 1);
  int64_t count = 0;
  for (size_t pos = text.find(sub); pos != std::string::npos;
       pos = text.find(sub, pos + sub.size()))
    ++count;
  return Value::integer(count);
}

// Python's separator.join(items), which takes strings only.
std::string join_strings(const std::string& what, const std::string& separator,
                         const Value* items) {
  if (items == nullptr || !items->is_array()) fail_render("{} needs a list of strings", what);
  std::string out;
  for (size_t i = 0; i < items->as_array().size(); ++i) {
    const Value& item = items->as_array()[i];
    if (!item.is_string()) fail_render("{}: item {} is {}, not a string", what, i, type_name(item));
    if (i > 0) append_charged(out, separator);  // as it grows
    append_charged(out, item.as_string());
  }
  return out;
}

Value string_method(const std::string& what, const std::string& text, std::string_view name,
                    CallArgs& args) {
  using Transform = std::string (*)(std::string_view);
  static const std::pair<std::string_view, Transform> kTransforms[] = {
      {"upper", ascii_upper},
      {"lower", ascii_lower},
      {"title", title_text},
      {"capitalize", capitalize_text}};
  for (const auto& [method, transform] : kTransforms) {
    if (name != method) continue;
    expect_no_args(what, args);
    return Value::string(transform(text));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(what, args, {"chars"});
    return Value::string(strip_text(text, p.string(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    Params p(what, args, {"affix"});
    if (p.get(0) == nullptr) fail_render("{} needs an argument", what);
    return Value::boolean(affix_matches(what, text, *p.get(0), name == "startswith"));
  }
  if (name == "split") {
    Params p(what, args, {"sep", "maxsplit"});
    return Value::charged_array(split_text(text, p.string(0), p.integer(1, -1)));
  }
  if (name == "replace") {
    Params p(what, args, {"old", "new", "count"});
    if (p.string(0) == nullptr || p.string(1) == nullptr)
      fail_render("{} needs old and new strings", what);
    return Value::charged_string(replace_text(text, *p.string(0), *p.string(1), p.integer(2, -1)));
  }
  if (name == "find" || name == "count") {
    Params p(what, args, {"sub"});
    if (p.string(0) == nullptr) fail_render("{} needs a string", what);
    return find_or_count(text, *p.string(0), name == "find");
  }
  if (name == "join") {
    Params p(what, args, {"iterable"});
    return Value::charged_string(join_strings(what, text, p.get(0)));
  }
  fail_render("unsupported method '{}' on string", name);
}

Value list_method(const std::string& what, const Array& items, std::string_view name,
                  CallArgs& args) {
  if (name != "index" && name != "count") fail_render("unsupported method '{}' on list", name);
  Params p(what, args, {"value"});
  if (p.get(0) == nullptr) fail_render("{} needs an argument", what);
  const auto equal = [&](const Value& item) { return loose_equals(item, *p.get(0)); };
  if (name == "count") return Value::integer(std::count_if(items.begin(), items.end(), equal));
  const auto it = std::find_if(items.begin(), items.end(), equal);
  if (it == items.end()) fail_render("{}: value is not in the list", what);
  return Value::integer(it - items.begin());
}

Value dict_method(const std::string& what, const Value& dict, std::string_view name,
                  CallArgs& args) {
  if (name == "dictsort") return apply_filter("dictsort", dict, args);
  if (name == "get") {
    Params p(what, args, {"key", "default"});
    const Value* key = p.get(0);
    if (key == nullptr || !key->is_string()) fail_render("{} needs a string key", what);
    const Value* member = dict.find(key->as_string());
    return member != nullptr ? *member : p.value_or(1, Value::none());
  }
  expect_no_args(what, args);
  if (name == "items") return Value::array(dict_items(dict));
  Array out;
  for (const auto& [key, value] : dict.as_object()) {
    if (name == "keys") {
      out.push_back(Value::string(key));
    } else if (name == "values") {
      out.push_back(value);
    } else {
      fail_render("unsupported method '{}' on dict", name);
    }
  }
  return Value::array(std::move(out));
}

// ---- Globals ----

Value global_range(CallArgs& args, Scope&) {
  Params p("range()", args, {"start", "stop", "step"});
  int64_t start = p.integer(0, 0), stop = p.integer(1, 0);
  const int64_t step = p.integer(2, 1);
  if (p.get(0) == nullptr) fail_render("range() needs at least one argument");
  if (p.get(1) == nullptr) std::swap(start, stop);
  if (step == 0) fail_render("range() step must not be zero");
  const double length = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                  static_cast<double>(step));
  if (length > static_cast<double>(kMaxRangeLength)) {
    fail_render("range() of {} items exceeds the limit of {}", length, kMaxRangeLength);
  }
  Array items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    items.push_back(Value::integer(i));
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return Value::array(std::move(items));
}

// The members namespace() and dict() are built from: a dict or list of pairs, then keywords.
Object members_from_args(const char* what, const CallArgs& args) {
  if (args.positional.size() > 1)
    fail_render("{} takes at most 1 positional argument, got {}", what, args.positional.size());
  Object members;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_object()) {
      members = source.as_object();
    } else if (source.is_array()) {
      for (const Value& pair : source.as_array()) {
        if (!pair.is_array() || pair.as_array().size() != 2 || !pair.as_array()[0].is_string()) {
          fail_render("{} expects [key, value] pairs with string keys", what);
        }
        set_member(members, pair.as_array()[0].as_string(), pair.as_array()[1]);
      }
    } else {
      fail_render("{} expects a dict or a list of pairs, got {}", what, type_name(source));
    }
  }
  for (const auto& [key, value] : args.keyword)
    set_member(members, key, value);
  return members;
}

Value global_dict(CallArgs& args, Scope&) {
  return Value::object(members_from_args("dict()", args));
}

Value global_raise_exception(CallArgs& args, Scope&) {
  const Value message = args.positional.empty() ? Value::string("") : args.positional[0];
  fail_render("{}", message.is_string() ? message.as_string() : to_output(message));
}

// The local time, formatted by the C library (a superset of the reference renderer's codes).
Value global_strftime_now(CallArgs& args, Scope&) {
  Params p("strftime_now()", args, {"format"});
  const std::string* format = p.string(0);
  if (format == nullptr) fail_render("strftime_now() needs a format string");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  for (size_t size = 64 + 4 * format->size(); size <= (size_t{1} << 16); size *= 4) {
    std::string out(size, '\0');
    const size_t length = std::strftime(out.data(), out.size(), format->c_str(), &local);
    if (length > 0 || format->empty()) return Value::string(out.substr(0, length));
  }
  return Value::string("");
}

}  // namespace

bool has_test(std::string_view name) {
  return test_table().contains(name);
}

bool apply_test(std::string_view name, const Value& operand, CallArgs& args) {
  const auto it = test_table().find(name);
  if (it == test_table().end()) fail_render("unsupported test '{}'", name);
  const std::string what = fmt::format("test '{}'", name);
  if (!it->second.takes_argument) {
    expect_no_args(what, args);
    return it->second.check(operand, Value());
  }
  Params p(what, args, {"value"});
  if (p.get(0) == nullptr) fail_render("{} needs an argument", what);
  return it->second.check(operand, *p.get(0));
}

Value call_method(const Value& object, std::string_view name, CallArgs& args) {
  const std::string what = fmt::format("{}.{}()", type_name(object), name);
  switch (object.kind()) {
    case Value::Kind::kString:
      return string_method(what, object.as_string(), name, args);
    case Value::Kind::kArray:
      return list_method(what, object.as_array(), name, args);
    case Value::Kind::kObject:
      return dict_method(what, object, name, args);
    case Value::Kind::kUndefined:
      fail_render("cannot call method '{}' of an undefined value", name);
    default:
      fail_render("unsupported method '{}' on {}", name, type_name(object));
  }
}

RenderNamespaces::~RenderNamespaces() {
  for (const std::shared_ptr<Namespace>& made : made_)
    made->attributes.clear();
}

Value RenderNamespaces::make(Object attributes) {
  charge_work(kStepWork);
  made_.push_back(std::make_shared<Namespace>(Namespace{std::move(attributes)}));
  return Value::name_space(made_.back());
}

void define_globals(Scope& scope, RenderNamespaces& namespaces) {
  scope.set("range", Value::function(Function{"range", global_range}));
  scope.set("namespace", Value::function(Function{
                             "namespace", [&namespaces](CallArgs& args, Scope&) {
                               return namespaces.make(members_from_args("namespace()", args));
                             }}));
  scope.set("dict", Value::function(Function{"dict", global_dict}));
  scope.set("raise_exception",
            Value::function(Function{"raise_exception", global_raise_exception}));
  scope.set("strftime_now", Value::function(Function{"strftime_now", global_strftime_now}));
}

}  // namespace pagoda::jinja
