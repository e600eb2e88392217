// Runtime values of the Jinja interpreter and their Python/JavaScript-like semantics: truthiness,
// equality, ordering, printing and JSON.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace pagoda::jinja {

class Value;
class Scope;

using Array = std::vector<Value>;
// Insertion-ordered, like Python dicts; lookups are linear because template dicts are small.
using Object = std::vector<std::pair<std::string, Value>>;

// A failure during rendering. It carries no location: the interpreter adds the line of the
// expression that was being evaluated and rethrows it as pagoda::Error.
class RenderFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail_render(fmt::format_string<Args...> format, Args&&... args) {
  throw RenderFailure(fmt::format(format, std::forward<Args>(args)...));
}

struct CallArgs {
  std::vector<Value> positional;
  Object keyword;
};

// A callable value: a macro, `caller`, or a global such as range(). `scope` is the caller's scope;
// macros see it (dynamic scoping, as the reference renderer does).
struct Function {
  std::string name;
  std::function<Value(CallArgs& args, Scope& scope)> call;
};

// The mutable object made by namespace(); shared by every value that refers to it.
struct Namespace {
  Object attributes;
};

// Lists and dicts nest at most this deep (a JSON context nests at most 256 levels; a template
// can nest further only by building lists in a loop), and a value prints at most this deep (a
// namespace may hold itself).
inline constexpr int kMaxValueDepth = 512;

// The work one render may do (RenderBudget), charged as it goes: bytes of every string made or
// written out, of every list and dict element (its own size: kItemWork, kMemberWork), and
// kStepWork for each loop iteration and call.
// A template that would run or grow without end (loops nested past reason, a string doubled in a
// loop) fails with RenderFailure instead. Work outside a render is not counted.
inline constexpr uint64_t kStepWork = 256;
void charge_work(uint64_t units);
// out += piece, its bytes charged first: how a string that a render builds piece by piece is
// charged as it grows (and then taken by Value::charged_string).
inline void append_charged(std::string& out, std::string_view piece) {
  charge_work(piece.size());
  out += piece;
}

// Makes `limit` units the current thread's budget while it lives.
class RenderBudget {
 public:
  explicit RenderBudget(uint64_t limit);
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;
  ~RenderBudget();

 private:
  friend void charge_work(uint64_t units);
  uint64_t left_;
  RenderBudget* previous_;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kArray,
    kObject,
    kNamespace,
    kFunction
  };

  Value() = default;  // undefined
  static Value none() { return make<std::nullptr_t>(nullptr); }
  static Value boolean(bool b) { return make<bool>(b); }
  static Value integer(int64_t i) { return make<int64_t>(i); }
  static Value number(double d) { return make<double>(d); }
  static Value string(std::string s) {
    charge_work(s.size());
    return charged_string(std::move(s));
  }
  // A string whose bytes were charged as it was built.
  static Value charged_string(std::string s) { return make<std::string>(std::move(s)); }
  // Fail with RenderFailure past kMaxValueDepth.
  static Value array(Array a);
  // A list whose elements were charged as it was built.
  static Value charged_array(Array a);
  static Value object(Object o);
  static Value name_space(std::shared_ptr<Namespace> n) { return make<NamespacePtr>(std::move(n)); }
  static Value function(Function f) {
    return make<FunctionPtr>(std::make_shared<const Function>(std::move(f)));
  }

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is(Kind k) const { return kind() == k; }
  bool is_undefined() const { return is(Kind::kUndefined); }
  bool is_none() const { return is(Kind::kNone); }
  bool is_string() const { return is(Kind::kString); }
  bool is_array() const { return is(Kind::kArray); }
  bool is_object() const { return is(Kind::kObject); }
  bool is_int() const { return is(Kind::kInt); }
  bool is_float() const { return is(Kind::kFloat); }
  bool is_number() const { return is_int() || is_float(); }
  // Numbers and booleans, which arithmetic and ordering treat alike (True == 1).
  bool is_numeric() const { return is_number() || is(Kind::kBool); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  double as_double() const;  // any numeric kind
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const Array& as_array() const { return std::get<ArrayPtr>(data_)->items; }
  const Object& as_object() const { return std::get<ObjectPtr>(data_)->items; }
  Namespace& as_namespace() const { return *std::get<NamespacePtr>(data_); }
  const Function& as_function() const { return *std::get<FunctionPtr>(data_); }

  // The member named `key` of a dict or namespace, or nullptr.
  const Value* find(std::string_view key) const;
  // Identity of shared values (namespaces, functions); null for the rest.
  const void* identity() const;
  // Levels of lists and dicts: 0 for anything else (a namespace too).
  int depth() const;

 private:
  // Lists and dicts are immutable once built (templates cannot mutate them, as in the sandbox
  // transformers renders with), so copies share them.
  template <typename Items>
  struct Nested {
    Items items;
    int depth;  // 1 + the deepest item's
  };
  using ArrayPtr = std::shared_ptr<const Nested<Array>>;
  using ObjectPtr = std::shared_ptr<const Nested<Object>>;
  using NamespacePtr = std::shared_ptr<Namespace>;
  using FunctionPtr = std::shared_ptr<const Function>;
  // Alternatives in the order of Kind.
  using Data = std::variant<std::monostate, std::nullptr_t, bool, int64_t, double, std::string,
                            ArrayPtr, ObjectPtr, NamespacePtr, FunctionPtr>;

  template <typename T, typename Arg>
  static Value make(Arg&& arg) {
    Value v;
    v.data_.emplace<T>(std::forward<Arg>(arg));
    return v;
  }

  Data data_;
};

// What a list element and a dict member are charged: their bytes, so that lists of many small
// values (a long string split at every byte) count the memory they take.
inline constexpr uint64_t kItemWork = sizeof(Value);
inline constexpr uint64_t kMemberWork = sizeof(std::pair<std::string, Value>);

const char* type_name(const Value& v);
const Value* find_member(const Object& object, std::string_view key);
// Replaces the member named `key`, or appends it.
void set_member(Object& object, std::string_view key, Value value);

// JSON input (the render context): integral numbers become integers, like JavaScript numbers.
Value from_json(const nlohmann::ordered_json& json);

bool truthy(const Value& v);
// `==`: none equals undefined and booleans compare as numbers (JavaScript's loose equality on
// scalars); lists and dicts compare by content, like Python.
bool loose_equals(const Value& a, const Value& b);
// `in`, `unique` and the `eq` test: like loose_equals, but kinds must match (numbers aside).
bool strict_equals(const Value& a, const Value& b);
// Ordering for sort, dictsort, min and max: numbers (booleans included) with numbers, strings
// with strings, none with none. Anything else fails.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

// How `{{ value }}` prints it: none and undefined print nothing, floats keep a ".0", true prints
// "true", lists and dicts print as JSON.
std::string to_output(const Value& v);
// How `~`, `+` and `join` stringify a value: JavaScript's String(), so floats drop the ".0" and
// lists join their printed items with ",".
std::string to_concat_string(const Value& v);

struct JsonOptions {
  std::optional<int> indent;
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::optional<std::pair<std::string, std::string>> separators;  // item, key
  bool undefined_as_null = true;
};
// `v` as JSON, its bytes charged to the render's work as they are written.
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace pagoda::jinja
