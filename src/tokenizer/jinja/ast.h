// Syntax tree of a parsed Jinja template. Immutable after parsing; renders share it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace pagoda::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct ArgList {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr positional_spread;  // *expr, after the positional arguments
  ExprPtr keyword_spread;     // **expr, last
};

struct FilterCall {
  std::string name;
  ArgList args;
};

enum class UnaryOp { kNot, kNegate, kPlus };
enum class BinaryOp {
  kAnd,
  kOr,
  kAdd,
  kSubtract,
  kConcat,
  kMultiply,
  kDivide,
  kFloorDivide,
  kModulo,
  kPower,
  kEqual,
  kNotEqual,
  kLess,
  kLessEqual,
  kGreater,
  kGreaterEqual,
  kIn,
  kNotIn,
};

struct Literal {
  Value value;
};
struct Name {
  std::string name;
};
struct ListLiteral {
  std::vector<ExprPtr> items;  // tuples too: they behave as lists
};
struct DictLiteral {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct Attribute {  // object.name
  ExprPtr object;
  std::string name;
};
struct Subscript {  // object[index], object.0
  ExprPtr object;
  ExprPtr index;
};
struct Slice {  // object[start:stop:step]; absent parts are null
  ExprPtr object, start, stop, step;
};
struct Call {
  ExprPtr callee;
  ArgList args;
};
struct Filter {
  ExprPtr operand;
  FilterCall filter;
};
struct Test {
  ExprPtr operand;
  std::string name;
  ArgList args;
  bool negated = false;
};
struct Unary {
  UnaryOp op;
  ExprPtr operand;
};
struct Binary {
  BinaryOp op;
  ExprPtr left, right;
};
struct Conditional {  // then_value if condition else else_value; else_value may be null
  ExprPtr condition, then_value, else_value;
};

struct Expr {
  int line;
  std::variant<Literal, Name, ListLiteral, DictLiteral, Attribute, Subscript, Slice, Call, Filter,
               Test, Unary, Binary, Conditional>
      node;
  int depth = 1;  // height of this subtree; the parser bounds it
};

struct Stmt;
using Body = std::vector<Stmt>;

// Parameters of a macro or call block. `varargs`/`kwargs` are collected only when the body reads
// them, as in Jinja.
struct Signature {
  std::vector<std::pair<std::string, ExprPtr>> params;  // name, default (may be null)
  bool reads_varargs = false;
  bool reads_kwargs = false;
};

struct TextStmt {
  std::string text;
};
struct OutputStmt {
  ExprPtr value;
};
struct IfStmt {  // elif is an IfStmt alone in else_body
  ExprPtr condition;
  Body then_body, else_body;
};
struct ForStmt {
  std::vector<std::string> targets;
  bool unpack = false;  // `for a, b in ...`
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`; may be null
  Body body, else_body;
};
struct SetStmt {  // target is a Name, a ListLiteral of Names or an Attribute
  ExprPtr target;
  ExprPtr value;  // null for `{% set x %}...{% endset %}`
  Body body;
};
struct MacroStmt {
  std::string name;
  Signature signature;
  Body body;
};
struct CallBlockStmt {  // {% call(params) macro(args) %}body{% endcall %}
  Signature caller_signature;
  ExprPtr call;  // a Call expression
  Body body;
};
struct FilterBlockStmt {
  std::vector<FilterCall> filters;
  Body body;
};
struct LoopControlStmt {
  bool is_break;
};

struct Stmt {
  int line;
  std::variant<TextStmt, OutputStmt, IfStmt, ForStmt, SetStmt, MacroStmt, CallBlockStmt,
               FilterBlockStmt, LoopControlStmt>
      node;
};

}  // namespace pagoda::jinja
