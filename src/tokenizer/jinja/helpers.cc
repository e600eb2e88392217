#include "tokenizer/jinja/helpers.h"

#include <algorithm>

#include "tokenizer/jinja/text.h"
#include "tokenizer/unicode.h"

namespace pagoda::jinja {

Params::Params(std::string_view what, const CallArgs& args, std::vector<std::string_view> names)
    : what_(what), args_(args), names_(std::move(names)) {
  if (args.positional.size() > names_.size()) {
    fail_render("{} takes at most {} argument(s), got {}", what_, names_.size(),
                args.positional.size());
  }
  for (const auto& [key, unused] : args.keyword) {
    const auto it = std::find(names_.begin(), names_.end(), key);
    if (it == names_.end()) fail_render("{} got an unexpected keyword argument '{}'", what_, key);
    if (static_cast<size_t>(it - names_.begin()) < args.positional.size()) {
      fail_render("{} got multiple values for argument '{}'", what_, key);
    }
  }
}

const Value* Params::get(size_t i) const {
  if (i < args_.positional.size()) return &args_.positional[i];
  return find_member(args_.keyword, names_[i]);
}

Value Params::value_or(size_t i, Value fallback) const {
  const Value* v = get(i);
  return v != nullptr ? *v : std::move(fallback);
}

bool Params::flag(size_t i, bool fallback) const {
  const Value* v = get(i);
  return v != nullptr ? truthy(*v) : fallback;
}

int64_t Params::integer(size_t i, int64_t fallback) const {
  const Value* v = get(i);
  if (v == nullptr || v->is_none()) return fallback;
  if (!v->is_int()) {
    fail_render("{}: argument '{}' must be an integer, got {}", what_, names_[i], type_name(*v));
  }
  return v->as_int();
}

const std::string* Params::string(size_t i) const {
  const Value* v = get(i);
  if (v == nullptr || v->is_none()) return nullptr;
  if (!v->is_string()) {
    fail_render("{}: argument '{}' must be a string, got {}", what_, names_[i], type_name(*v));
  }
  return &v->as_string();
}

void expect_no_args(std::string_view what, const CallArgs& args) {
  if (!args.positional.empty() || !args.keyword.empty()) fail_render("{} takes no arguments", what);
}

void fail_type(std::string_view what, const Value& v) {
  fail_render("{} cannot be applied to {}", what, type_name(v));
}

const std::string& require_string(std::string_view what, const Value& v) {
  if (!v.is_string()) fail_type(what, v);
  return v.as_string();
}

Value get_attribute_path(const Value& item, std::string_view path) {
  Value value = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string_view part = path.substr(start, dot - start);
    if (value.is_array()) {
      const bool is_index =
          !part.empty() && part.size() < 10 &&
          std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      const Array& items = value.as_array();
      const size_t index = is_index ? std::stoul(std::string(part)) : items.size();
      value = index < items.size() ? items[index] : Value();
    } else {
      const Value* member = value.find(part);
      value = member != nullptr ? *member : Value();
    }
    if (dot == std::string_view::npos || value.is_undefined()) return value;
    start = dot + 1;
  }
}

std::string strip_text(std::string_view text, const std::string* chars, bool left, bool right) {
  if (chars == nullptr) {
    if (left) text = trim_start(text);
    if (right) text = trim_end(text);
    return std::string(text);
  }
  // The text is walked in place, not split: only its ends are cut. Each test of a code point
  // against the set is charged, as a hostile set may be long.
  const std::vector<std::string> set = code_points(*chars);
  const auto in_set = [&](size_t pos, size_t next) {
    charge_work(set.size());
    return std::find(set.begin(), set.end(), text.substr(pos, next - pos)) != set.end();
  };
  size_t begin = 0;
  while (left && begin < text.size()) {
    size_t next = begin;
    next_code_point(text, next);
    if (!in_set(begin, next)) break;
    begin = next;
  }
  size_t end = text.size();
  if (right) {
    // Past the last code point outside the set.
    end = begin;
    for (size_t pos = begin; pos < text.size();) {
      size_t next = pos;
      next_code_point(text, next);
      if (!in_set(pos, next)) end = next;
      pos = next;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::vector<std::string> code_points(std::string_view text) {
  charge_work(text.size() * sizeof(std::string));
  return split_code_points(text);
}

Array code_point_values(std::string_view text) {
  Array out;
  for (std::string& c : code_points(text))
    out.push_back(Value::string(std::move(c)));
  return out;
}

CodePoints::CodePoints(std::string_view text) : text_(text) {
  charge_work(text.size());
  if (std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; })) return;
  charge_work(text.size() * sizeof(uint32_t));
  starts_.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    starts_.push_back(static_cast<uint32_t>(pos));
    next_code_point(text, pos);
  }
  starts_.push_back(static_cast<uint32_t>(text.size()));
}

int64_t CodePoints::size() const {
  return static_cast<int64_t>(starts_.empty() ? text_.size() : starts_.size() - 1);
}

size_t CodePoints::offset(int64_t index) const {
  return starts_.empty() ? static_cast<size_t>(index) : starts_[index];
}

std::string_view CodePoints::at(int64_t index) const {
  return span(index, index + 1);
}

std::string_view CodePoints::span(int64_t from, int64_t to) const {
  return text_.substr(offset(from), offset(to) - offset(from));
}

std::string replace_text(std::string_view text, std::string_view old, std::string_view replacement,
                         int64_t count) {
  // Every piece is charged as it is appended, before a hostile pattern's output outgrows memory.
  std::string out;
  const auto append = [&](std::string_view piece) { append_charged(out, piece); };
  size_t pos = 0;
  if (old.empty()) {
    // An empty pattern matches before every character and at the end.
    while (count != 0) {
      append(replacement);
      --count;
      if (pos >= text.size()) return out;
      size_t length = 0;
      decode_utf8(text, pos, &length);
      append(text.substr(pos, length));
      pos += length;
    }
    append(text.substr(pos));
    return out;
  }
  for (size_t found; count != 0 && (found = text.find(old, pos)) != std::string_view::npos;
       --count) {
    append(text.substr(pos, found - pos));
    append(replacement);
    pos = found + old.size();
  }
  append(text.substr(pos));
  return out;
}

std::string title_text(std::string_view text) {
  std::string out(text);
  bool in_word = false;
  for (char& c : out) {
    const bool word = is_ascii_word(c);
    if (word && !in_word && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    in_word = word;
  }
  return out;
}

std::string capitalize_text(std::string_view text) {
  std::string out(text);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z')
    out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

Array dict_items(const Value& dict) {
  Array items;
  for (const auto& [key, value] : dict.as_object()) {
    items.push_back(Value::array({Value::string(key), value}));
  }
  return items;
}

Array sorted_dict_items(const Value& dict, const DictSortOptions& options) {
  Array items = dict_items(dict);
  const size_t index = options.by_value ? 1 : 0;
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int c = compare_values(a.as_array()[index], b.as_array()[index], options.case_sensitive);
    return options.reverse ? c > 0 : c < 0;
  });
  return items;
}

}  // namespace pagoda::jinja
