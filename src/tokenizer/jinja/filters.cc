// Built-in filters. Where the reference JavaScript renderer implements a filter, its behaviour
// is matched; the rest follow Jinja's documentation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/helpers.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/text.h"

namespace pagoda::jinja {
namespace {

// Bounds on arguments that size the output.
constexpr int64_t kMaxIndentWidth = 1024;

// `what` names the filter in error messages, e.g. "filter 'upper'".
using FilterFn = Value (*)(const std::string& what, const Value& operand, CallArgs& args);

// The string filter: none prints as Python does, undefined as nothing.
std::string stringify(const Value& v) {
  if (v.is_string()) return v.as_string();
  if (v.is_none()) return "None";
  return to_output(v);
}

// Lists, and what iterating a string, dict or undefined yields in Jinja.
const Array& require_sequence(std::string_view what, const Value& v, Array& storage) {
  if (v.is_array()) return v.as_array();
  if (v.is_string()) return storage = code_point_values(v.as_string());
  if (v.is_undefined()) return storage;
  if (v.is_object()) {
    for (const auto& [key, unused] : v.as_object())
      storage.push_back(Value::string(key));
    return storage;
  }
  fail_type(what, v);
}

std::optional<std::string> attribute_param(const Params& p, size_t i) {
  const Value* v = p.get(i);
  if (v == nullptr || v->is_none()) return std::nullopt;
  if (v->is_int()) return std::to_string(v->as_int());
  if (!v->is_string()) fail_render("attribute must be a string, got {}", type_name(*v));
  return v->as_string();
}

Value keyed(const Value& item, const std::optional<std::string>& attribute) {
  return attribute ? get_attribute_path(item, *attribute) : item;
}

Value filter_abs(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  if (v.is_int() && v.as_int() != INT64_MIN) return Value::integer(std::abs(v.as_int()));
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  fail_type(what, v);
}

Value filter_batch(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"linecount", "fill_with"});
  const int64_t size = p.integer(0, 0);
  if (size <= 0) fail_render("filter 'batch' needs a positive line count, got {}", size);
  Array storage;
  const Array& items = require_sequence(what, v, storage);
  const Value* fill = p.get(1);
  Array rows, row;
  for (const Value& item : items) {
    row.push_back(item);
    if (static_cast<int64_t>(row.size()) == size)
      rows.push_back(Value::array(std::exchange(row, {})));
  }
  if (!row.empty()) {
    const bool fills = fill != nullptr && !fill->is_none();
    // Charged before the last row grows: the line count may be any size.
    if (fills) charge_work(static_cast<uint64_t>(size) - row.size());
    while (fills && static_cast<int64_t>(row.size()) < size) {
      row.push_back(*fill);
    }
    rows.push_back(Value::array(std::move(row)));
  }
  return Value::array(std::move(rows));
}

Value filter_bool(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  return Value::boolean(truthy(v));
}

Value filter_default(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"default_value", "boolean"});
  if (v.is_undefined() || (p.flag(1, false) && !truthy(v))) return p.value_or(0, Value::string(""));
  return v;
}

Value filter_dictsort(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"case_sensitive", "by", "reverse"});
  if (!v.is_object()) fail_type(what, v);
  const std::string* by = p.string(1);
  if (by != nullptr && *by != "key" && *by != "value") {
    fail_render("filter 'dictsort': 'by' must be 'key' or 'value', got '{}'", *by);
  }
  return Value::array(
      sorted_dict_items(v, {p.flag(0, false), by != nullptr && *by == "value", p.flag(2, false)}));
}

Value filter_escape(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  return Value::string(html_escape(stringify(v)));
}

Value filter_first_or_last(const std::string& what, const Value& v, CallArgs& args) {
  const bool first = what == "filter 'first'";
  expect_no_args(what, args);
  Array storage;
  const Array& items = require_sequence(what, v, storage);
  if (items.empty()) return Value();
  return first ? items.front() : items.back();
}

Value filter_int(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"default", "base"});
  const Value fallback = p.value_or(0, Value::integer(0));
  const int64_t base = p.integer(1, 10);
  if (base < 2 || base > 36) fail_render("filter 'int': base must be in [2, 36], got {}", base);
  switch (v.kind()) {
    case Value::Kind::kInt:
      return v;
    case Value::Kind::kBool:
      return Value::integer(v.as_bool());
    case Value::Kind::kFloat: {
      // Floors, as the reference renderer does.
      const double floored = std::floor(v.as_float());
      if (!std::isfinite(floored) || std::fabs(floored) >= 9.2e18) return fallback;
      return Value::integer(static_cast<int64_t>(floored));
    }
    case Value::Kind::kString: {
      const auto parsed = parse_int_prefix(v.as_string(), static_cast<int>(base));
      return parsed ? Value::integer(*parsed) : fallback;
    }
    default:
      return fallback;
  }
}

Value filter_float(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"default"});
  if (v.is_numeric()) return Value::number(v.as_double());
  if (v.is_string()) {
    if (const auto parsed = parse_float_prefix(v.as_string())) return Value::number(*parsed);
  }
  return p.value_or(0, Value::number(0.0));
}

Value filter_indent(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"width", "first", "blank"});
  const std::string& text = require_string(what, v);
  std::string padding(4, ' ');
  if (const Value* width = p.get(0); width != nullptr && width->is_string()) {
    padding = width->as_string();
  } else if (width != nullptr) {
    const int64_t n = p.integer(0, 4);
    if (n < 0 || n > kMaxIndentWidth) {
      fail_render("filter 'indent': width must be in [0, {}], got {}", kMaxIndentWidth, n);
    }
    padding.assign(n, ' ');
  }
  const bool first = p.flag(1, false), blank = p.flag(2, false);
  // Charged as it grows: padding on every line of a long text multiplies it.
  std::string out;
  const auto append = [&](std::string_view piece) { append_charged(out, piece); };
  size_t start = 0;
  for (size_t line = 0;; ++line) {
    const size_t end = text.find('\n', start);
    const std::string_view piece = std::string_view(text).substr(start, end - start);
    if (line > 0) append("\n");
    if ((line > 0 || first) && (!piece.empty() || blank)) append(padding);
    append(piece);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return Value::charged_string(std::move(out));
}

Value filter_items(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  if (v.is_undefined()) return Value::array({});
  if (!v.is_object()) fail_type(what, v);
  return Value::array(dict_items(v));
}

Value filter_join(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"d", "attribute"});
  const std::string* separator = p.string(0);
  const auto attribute = attribute_param(p, 1);
  if (!v.is_array() && !v.is_string()) fail_type(what, v);
  Array storage;
  const Array& items = require_sequence(what, v, storage);
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0 && separator != nullptr) append_charged(out, *separator);  // as it grows
    const Value item = keyed(items[i], attribute);
    if (item.is_none() || item.is_undefined()) continue;
    append_charged(out, to_concat_string(item));
  }
  return Value::charged_string(std::move(out));
}

Value filter_length(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  switch (v.kind()) {
    case Value::Kind::kString:
      return Value::integer(static_cast<int64_t>(count_code_points(v.as_string())));
    case Value::Kind::kArray:
      return Value::integer(static_cast<int64_t>(v.as_array().size()));
    case Value::Kind::kObject:
      return Value::integer(static_cast<int64_t>(v.as_object().size()));
    case Value::Kind::kUndefined:
      return Value::integer(0);
    default:
      fail_type(what, v);
  }
}

Value filter_list(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  if (v.is_array()) return v;
  Array storage;
  require_sequence(what, v, storage);
  return Value::array(std::move(storage));
}

Value filter_map(const std::string& what, const Value& v, CallArgs& args) {
  Array storage;
  const Array& items = require_sequence(what, v, storage);
  Array out;
  if (find_member(args.keyword, "attribute") != nullptr) {
    Params p(what, args, {"attribute", "default"});
    const std::string attribute = *attribute_param(p, 0);
    const Value* fallback = p.get(1);
    for (const Value& item : items) {
      if (!item.is_object() && !item.is(Value::Kind::kNamespace)) {
        fail_render("filter 'map' with attribute= needs dicts, got {}", type_name(item));
      }
      Value mapped = get_attribute_path(item, attribute);
      out.push_back(mapped.is_undefined() && fallback != nullptr ? *fallback : std::move(mapped));
    }
    return Value::array(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    fail_render("filter 'map' needs a filter name or attribute=");
  }
  const std::string name = args.positional[0].as_string();
  if (!has_filter(name)) fail_render("unsupported filter '{}'", name);
  CallArgs rest{Array(args.positional.begin() + 1, args.positional.end()), args.keyword};
  for (const Value& item : items) {
    CallArgs item_args = rest;
    out.push_back(apply_filter(name, item, item_args));
  }
  return Value::array(std::move(out));
}

Value filter_min_or_max(const std::string& what, const Value& v, CallArgs& args) {
  const bool want_max = what == "filter 'max'";
  Params p(what, args, {"case_sensitive", "attribute"});
  const bool case_sensitive = p.flag(0, false);
  const auto attribute = attribute_param(p, 1);
  Array storage;
  const Array& items = require_sequence(what, v, storage);
  const Value* best = nullptr;
  for (const Value& item : items) {
    const int c = best == nullptr ? 0
                                  : compare_values(keyed(item, attribute), keyed(*best, attribute),
                                                   case_sensitive);
    if (best == nullptr || (want_max ? c > 0 : c < 0)) best = &item;
  }
  return best != nullptr ? *best : Value();
}

Value filter_replace(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"old", "new", "count"});
  const std::string& text = require_string(what, v);
  const std::string* old = p.string(0);
  const std::string* replacement = p.string(1);
  if (old == nullptr || replacement == nullptr)
    fail_render("filter 'replace' needs old and new strings");
  return Value::charged_string(replace_text(text, *old, *replacement, p.integer(2, -1)));
}

Value filter_reverse(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  if (!v.is_array() && !v.is_string()) fail_type(what, v);
  Array storage;
  Array items = require_sequence(what, v, storage);
  std::reverse(items.begin(), items.end());
  if (v.is_array()) return Value::array(std::move(items));
  std::string out;
  for (const Value& c : items)
    out += c.as_string();
  return Value::string(std::move(out));
}

Value filter_round(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"precision", "method"});
  if (!v.is_numeric()) fail_type(what, v);
  const int64_t precision = std::clamp<int64_t>(p.integer(0, 0), -308, 308);
  const std::string* method = p.string(1);
  const double x = v.as_double();
  if (method == nullptr || *method == "common") {
    if (precision < 0) {
      const double scale = std::pow(10.0, static_cast<double>(-precision));
      return Value::number(std::nearbyint(x / scale) * scale);
    }
    // printf rounds the exact binary value half-to-even, as Python's round() does.
    char buffer[400];
    std::snprintf(buffer, sizeof(buffer), "%.*f",
                  static_cast<int>(std::min<int64_t>(precision, 40)), x);
    return Value::number(std::strtod(buffer, nullptr));
  }
  if (*method != "ceil" && *method != "floor") {
    fail_render("filter 'round': method must be 'common', 'ceil' or 'floor', got '{}'", *method);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  return Value::number((*method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
}

Value filter_safe(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  return v;
}

// select, reject, selectattr and rejectattr. An item whose attribute is missing fails the test,
// as in the reference renderer.
Value filter_select(const std::string& what, const Value& v, CallArgs& args) {
  const bool select = what == "filter 'select'" || what == "filter 'selectattr'";
  const bool by_attribute = what.ends_with("attr'");
  Array storage;
  const Array& items = require_sequence(what, v, storage);
  size_t next = 0;
  std::string attribute, test;
  if (by_attribute) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      fail_render("{} needs an attribute name", what);
    }
    attribute = args.positional[next++].as_string();
  }
  if (args.positional.size() > next) {
    if (!args.positional[next].is_string()) fail_render("{} needs a test name", what);
    test = args.positional[next++].as_string();
    if (!has_test(test)) fail_render("unsupported test '{}'", test);
  }
  const CallArgs test_args{Array(args.positional.begin() + next, args.positional.end()),
                           args.keyword};
  Array out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attribute) {
      if (!item.is_object() && !item.is(Value::Kind::kNamespace)) {
        fail_render("{} needs dicts, got {}", what, type_name(item));
      }
      subject = get_attribute_path(item, attribute);
    }
    CallArgs item_args = test_args;
    const bool passed = !(by_attribute && subject.is_undefined()) &&
                        (test.empty() ? truthy(subject) : apply_test(test, subject, item_args));
    if (passed == select) out.push_back(item);
  }
  return Value::array(std::move(out));
}

Value filter_sort(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = p.flag(0, false), case_sensitive = p.flag(1, false);
  const auto attribute = attribute_param(p, 2);
  Array storage;
  const Array& items = require_sequence(what, v, storage);
  std::vector<std::pair<Value, Value>> keyed_items;  // key, item
  for (const Value& item : items)
    keyed_items.emplace_back(keyed(item, attribute), item);
  std::stable_sort(keyed_items.begin(), keyed_items.end(), [&](const auto& a, const auto& b) {
    const int c = compare_values(a.first, b.first, case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  Array out;
  for (auto& [key, item] : keyed_items)
    out.push_back(std::move(item));
  return Value::array(std::move(out));
}

Value filter_string(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  return Value::string(stringify(v));
}

// Removes tags and comments, collapses whitespace and unescapes the common entities.
Value filter_striptags(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  const std::string text = stringify(v);
  std::string stripped;
  for (size_t pos = 0; pos < text.size();) {
    const bool comment = text.compare(pos, 4, "<!--") == 0;
    const size_t close = comment            ? text.find("-->", pos + 4)
                         : text[pos] == '<' ? text.find('>', pos + 1)
                                            : std::string::npos;
    if (close == std::string::npos) {
      stripped += text[pos++];
    } else {
      pos = close + (comment ? 3 : 1);
    }
  }
  std::string collapsed;
  for (size_t pos = js_space_length(stripped, 0); pos < stripped.size();) {
    const size_t spaces = js_space_length(stripped, pos);
    if (spaces > 0) {
      pos += spaces;
      if (pos < stripped.size()) collapsed += ' ';
    } else {
      collapsed += stripped[pos++];
    }
  }
  return Value::string(html_unescape(collapsed));
}

Value filter_sum(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"attribute", "start"});
  const auto attribute = attribute_param(p, 0);
  Value total = p.value_or(1, Value::integer(0));
  Array storage;
  for (const Value& item : require_sequence(what, v, storage)) {
    total = binary_op(BinaryOp::kAdd, total, keyed(item, attribute));
  }
  return total;
}

Value filter_tojson(const std::string& what, const Value& v, CallArgs& args) {
  if (!args.positional.empty()) {
    fail_render(
        "filter 'tojson' takes keyword arguments only: indent, ensure_ascii, sort_keys, "
        "separators");
  }
  Params p(what, args, {"indent", "ensure_ascii", "sort_keys", "separators"});
  JsonOptions options;
  if (const Value* indent = p.get(0); indent != nullptr && !indent->is_none()) {
    const int64_t width = p.integer(0, 0);
    if (width < 0 || width > kMaxIndentWidth) {
      fail_render("filter 'tojson': indent must be in [0, {}], got {}", kMaxIndentWidth, width);
    }
    options.indent = static_cast<int>(width);
  }
  options.ensure_ascii = p.flag(1, false);
  options.sort_keys = p.flag(2, false);
  if (const Value* separators = p.get(3); separators != nullptr && !separators->is_none()) {
    if (!separators->is_array() || separators->as_array().size() != 2 ||
        !separators->as_array()[0].is_string() || !separators->as_array()[1].is_string()) {
      fail_render("filter 'tojson': separators must be a pair of strings");
    }
    options.separators.emplace(separators->as_array()[0].as_string(),
                               separators->as_array()[1].as_string());
  }
  return Value::charged_string(to_json(v, options));  // charged as written
}

Value filter_trim(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"chars"});
  return Value::string(strip_text(require_string(what, v), p.string(0), true, true));
}

// Exact matches by default, as in the reference renderer.
Value filter_unique(const std::string& what, const Value& v, CallArgs& args) {
  Params p(what, args, {"case_sensitive", "attribute"});
  const bool case_sensitive = p.flag(0, true);
  const auto attribute = attribute_param(p, 1);
  Array storage;
  Array seen, out;
  for (const Value& item : require_sequence(what, v, storage)) {
    Value key = keyed(item, attribute);
    if (!case_sensitive && key.is_string()) key = Value::string(ascii_lower(key.as_string()));
    charge_work(seen.size());  // a comparison with each kept key
    if (std::none_of(seen.begin(), seen.end(),
                     [&](const Value& s) { return strict_equals(s, key); })) {
      seen.push_back(std::move(key));
      out.push_back(item);
    }
  }
  return Value::array(std::move(out));
}

template <std::string (*transform)(std::string_view)>
Value string_filter(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  return Value::string(transform(require_string(what, v)));
}

std::string upper_text(std::string_view text) {
  return ascii_upper(text);
}
std::string lower_text(std::string_view text) {
  return ascii_lower(text);
}

Value filter_wordcount(const std::string& what, const Value& v, CallArgs& args) {
  expect_no_args(what, args);
  int64_t count = 0;
  bool in_word = false;
  for (char c : require_string(what, v)) {
    // Non-ASCII bytes count as word characters, like Python's Unicode \w for letters.
    const bool word = is_ascii_word(c) || static_cast<unsigned char>(c) >= 0x80;
    count += word && !in_word;
    in_word = word;
  }
  return Value::integer(count);
}

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", filter_abs},
      {"batch", filter_batch},
      {"bool", filter_bool},
      {"capitalize", string_filter<capitalize_text>},
      {"count", filter_length},
      {"d", filter_default},
      {"default", filter_default},
      {"dictsort", filter_dictsort},
      {"e", filter_escape},
      {"escape", filter_escape},
      {"first", filter_first_or_last},
      {"float", filter_float},
      {"indent", filter_indent},
      {"int", filter_int},
      {"items", filter_items},
      {"join", filter_join},
      {"last", filter_first_or_last},
      {"length", filter_length},
      {"list", filter_list},
      {"lower", string_filter<lower_text>},
      {"map", filter_map},
      {"max", filter_min_or_max},
      {"min", filter_min_or_max},
      {"reject", filter_select},
      {"rejectattr", filter_select},
      {"replace", filter_replace},
      {"reverse", filter_reverse},
      {"round", filter_round},
      {"safe", filter_safe},
      {"select", filter_select},
      {"selectattr", filter_select},
      {"sort", filter_sort},
      {"string", filter_string},
      {"striptags", filter_striptags},
      {"sum", filter_sum},
      {"title", string_filter<title_text>},
      {"tojson", filter_tojson},
      {"trim", filter_trim},
      {"unique", filter_unique},
      {"upper", string_filter<upper_text>},
      {"wordcount", filter_wordcount},
  };
  return table;
}

}  // namespace

bool has_filter(std::string_view name) {
  return filter_table().contains(name);
}

Value apply_filter(std::string_view name, const Value& operand, CallArgs& args) {
  const auto it = filter_table().find(name);
  if (it == filter_table().end()) fail_render("unsupported filter '{}'", name);
  return it->second(fmt::format("filter '{}'", name), operand, args);
}

}  // namespace pagoda::jinja
