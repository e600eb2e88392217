// Helpers shared by the built-in filters, tests, methods and globals.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

// Binds call arguments to a fixed parameter list, by position or keyword, and checks that
// nothing else was passed.
class Params {
 public:
  Params(std::string_view what, const CallArgs& args, std::vector<std::string_view> names);

  // The argument for parameter `i`, or null when it was not passed.
  const Value* get(size_t i) const;
  Value value_or(size_t i, Value fallback) const;
  bool flag(size_t i, bool fallback) const;
  int64_t integer(size_t i, int64_t fallback) const;
  // Null when absent or none.
  const std::string* string(size_t i) const;

 private:
  std::string what_;
  const CallArgs& args_;
  std::vector<std::string_view> names_;
};

// For built-ins without parameters.
void expect_no_args(std::string_view what, const CallArgs& args);

[[noreturn]] void fail_type(std::string_view what, const Value& v);
const std::string& require_string(std::string_view what, const Value& v);

// `item.a.b` / `item.0` as map, sort and selectattr read it: undefined when any step is missing.
Value get_attribute_path(const Value& item, std::string_view path);

// Python's str.strip(chars); without `chars`, JavaScript whitespace as the reference renderer
// strips it.
std::string strip_text(std::string_view text, const std::string* chars, bool left, bool right);
// The code points of `text`, one string each, charged to the render as the memory they take (a
// string a byte at most): iterating a long string splits all of it.
std::vector<std::string> code_points(std::string_view text);
// The same as string values: what iterating a string yields.
Array code_point_values(std::string_view text);
// Where each code point of a text starts, for indexing and slicing it without splitting it: an
// ASCII text (every byte a code point) needs no table; another keeps 4 bytes a code point. The
// scan, and any table, are charged to the render's work.
class CodePoints {
 public:
  explicit CodePoints(std::string_view text);
  int64_t size() const;
  std::string_view at(int64_t index) const;  // 0 <= index < size()
  // Code points [from, to) (0 <= from <= to <= size()), as one piece of the text.
  std::string_view span(int64_t from, int64_t to) const;

 private:
  size_t offset(int64_t index) const;
  std::string_view text_;
  std::vector<uint32_t> starts_;  // empty for ASCII; else each code point's, then text_.size()
};
// Python's str.replace; a negative count replaces every occurrence. The result's bytes are charged
// to the render's work as it grows (Value::charged_string takes it).
std::string replace_text(std::string_view text, std::string_view old, std::string_view replacement,
                         int64_t count);
// The reference renderer's title(): uppercase each ASCII letter that starts a word; the rest of
// the word is left as is.
std::string title_text(std::string_view text);
// Uppercase the first character, leave the rest (the reference renderer's capitalize()).
std::string capitalize_text(std::string_view text);

// A dict's [key, value] pairs, optionally sorted (dictsort).
Array dict_items(const Value& dict);
struct DictSortOptions {
  bool case_sensitive = false;
  bool by_value = false;
  bool reverse = false;
};
Array sorted_dict_items(const Value& dict, const DictSortOptions& options);

}  // namespace pagoda::jinja
