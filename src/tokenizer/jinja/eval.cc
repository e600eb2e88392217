#include "tokenizer/jinja/eval.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "core/error.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/helpers.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/text.h"

namespace pagoda::jinja {

Value Scope::lookup(const std::string& name) const {
  for (const Scope* scope = this; scope != nullptr; scope = scope->parent_) {
    auto it = scope->variables_.find(name);
    if (it != scope->variables_.end()) return it->second;
  }
  return Value();
}

namespace {

// Bounds recursion through macros so a self-calling macro fails instead of overflowing the stack.
constexpr int kMaxCallDepth = 100;
// The work a render may do (charge_work): a million loop iterations or calls, 256 MiB of strings
// (64 times a million-token conversation), or sixteen million expressions, or a mix of them.
constexpr uint64_t kRenderWork = uint64_t{1} << 28;
constexpr uint64_t kExprWork = 16;

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  std::string render(const Body& program, const nlohmann::ordered_json& context) {
    if (!context.is_object())
      fail("template context must be a JSON object, got {}", context.type_name());
    RenderNamespaces namespaces;  // outlives every value of the render
    Scope globals;
    define_globals(globals, namespaces);
    for (const auto& [key, value] : context.items()) {
      try {
        globals.set(key, from_json(value));
      } catch (const RenderFailure& failure) {
        fail("context variable '{}': {}", key, failure.what());
      }
    }
    // The context's own values are not charged.
    const RenderBudget budget(kRenderWork);
    std::string out;
    exec(program, globals, out);
    return out;
  }

 private:
  // ---- Statements ----

  Flow exec(const Body& body, Scope& scope, std::string& out) {
    for (const Stmt& stmt : body) {
      Flow flow;
      try {
        flow = std::visit([&](const auto& node) { return exec_node(node, scope, out); }, stmt.node);
      } catch (const RenderFailure& failure) {
        fail("line {}: {}", stmt.line, failure.what());
      }
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  // Bodies of set blocks, filter blocks and macros; the parser keeps loop control out of them.
  std::string render_body(const Body& body, Scope& scope) {
    std::string out;
    exec(body, scope, out);
    return out;
  }

  // Output is charged as it is written.
  static void write(std::string& out, std::string_view text) {
    charge_work(text.size());
    out += text;
  }

  Flow exec_node(const TextStmt& stmt, Scope&, std::string& out) {
    write(out, stmt.text);
    return Flow::kNormal;
  }

  Flow exec_node(const OutputStmt& stmt, Scope& scope, std::string& out) {
    write(out, to_output(eval(*stmt.value, scope)));
    return Flow::kNormal;
  }

  Flow exec_node(const IfStmt& stmt, Scope& scope, std::string& out) {
    return exec(truthy(eval(*stmt.condition, scope)) ? stmt.then_body : stmt.else_body, scope, out);
  }

  Flow exec_node(const ForStmt& stmt, Scope& scope, std::string& out) {
    // The loop's variables live in one frame shared by its iterations and dropped afterwards.
    Scope loop_scope(&scope);
    Array items = iteration_items(eval(*stmt.iterable, loop_scope));
    if (stmt.filter) {
      Array kept;
      for (Value& item : items) {
        Scope test_scope(&loop_scope);
        bind_loop_targets(stmt, item, test_scope);
        if (truthy(eval(*stmt.filter, test_scope))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      charge_work(kStepWork);
      loop_scope.set("loop", loop_object(items, i));
      bind_loop_targets(stmt, items[i], loop_scope);
      if (exec(stmt.body, loop_scope, out) == Flow::kBreak) break;
    }
    return items.empty() ? exec(stmt.else_body, loop_scope, out) : Flow::kNormal;
  }

  static Array iteration_items(const Value& iterable) {
    switch (iterable.kind()) {
      case Value::Kind::kArray:
        return iterable.as_array();
      case Value::Kind::kUndefined:
        return {};
      case Value::Kind::kObject: {
        Array keys;
        for (const auto& [key, unused] : iterable.as_object())
          keys.push_back(Value::string(key));
        return keys;
      }
      case Value::Kind::kString:
        return code_point_values(iterable.as_string());
      default:
        fail_render("cannot iterate over {}", type_name(iterable));
    }
  }

  static Value loop_object(const Array& items, size_t i) {
    const auto n = static_cast<int64_t>(items.size());
    const auto index = static_cast<int64_t>(i);
    return Value::object({
        {"index", Value::integer(index + 1)},
        {"index0", Value::integer(index)},
        {"revindex", Value::integer(n - index)},
        {"revindex0", Value::integer(n - index - 1)},
        {"first", Value::boolean(index == 0)},
        {"last", Value::boolean(index == n - 1)},
        {"length", Value::integer(n)},
        {"previtem", index > 0 ? items[i - 1] : Value()},
        {"nextitem", index < n - 1 ? items[i + 1] : Value()},
    });
  }

  static void bind_loop_targets(const ForStmt& stmt, const Value& item, Scope& scope) {
    if (!stmt.unpack) return scope.set(stmt.targets[0], item);
    unpack(stmt.targets, item, scope);
  }

  static void unpack(const std::vector<std::string>& names, const Value& value, Scope& scope) {
    if (!value.is_array())
      fail_render("cannot unpack {} into {} names", type_name(value), names.size());
    const Array& items = value.as_array();
    if (items.size() != names.size()) {
      fail_render("cannot unpack {} items into {} names", items.size(), names.size());
    }
    for (size_t i = 0; i < names.size(); ++i)
      scope.set(names[i], items[i]);
  }

  Flow exec_node(const SetStmt& stmt, Scope& scope, std::string&) {
    Value value =
        stmt.value ? eval(*stmt.value, scope) : Value::string(render_body(stmt.body, scope));
    const Expr& target = *stmt.target;
    if (const auto* name = std::get_if<Name>(&target.node)) {
      scope.set(name->name, std::move(value));
    } else if (const auto* tuple = std::get_if<ListLiteral>(&target.node)) {
      std::vector<std::string> names;
      for (const auto& item : tuple->items)
        names.push_back(std::get<Name>(item->node).name);
      unpack(names, value, scope);
    } else {
      const auto& attribute = std::get<Attribute>(target.node);
      const Value object = eval(*attribute.object, scope);
      if (!object.is(Value::Kind::kNamespace)) {
        fail_render("cannot set attribute '{}' on {}; only namespace() objects are mutable",
                    attribute.name, type_name(object));
      }
      set_member(object.as_namespace().attributes, attribute.name, std::move(value));
    }
    return Flow::kNormal;
  }

  Flow exec_node(const MacroStmt& stmt, Scope& scope, std::string&) {
    auto call = [this, &stmt](CallArgs& args, Scope& caller) {
      return run_signature_body(stmt.signature, stmt.body, args, caller,
                                fmt::format("macro '{}'", stmt.name));
    };
    scope.set(stmt.name, Value::function(Function{stmt.name, std::move(call)}));
    return Flow::kNormal;
  }

  Flow exec_node(const CallBlockStmt& stmt, Scope& scope, std::string& out) {
    // `caller` may escape into a namespace; once the block ends it refuses to run.
    auto alive = std::make_shared<bool>(true);
    struct Expire {
      std::shared_ptr<bool> alive;
      ~Expire() { *alive = false; }
    } expire{alive};
    auto body = [this, &stmt, &scope, alive](CallArgs& args, Scope&) {
      if (!*alive) fail_render("caller() called outside of its call block");
      return run_signature_body(stmt.caller_signature, stmt.body, args, scope, "call block");
    };
    const Call& call = std::get<Call>(stmt.call->node);
    const Value callee = eval(*call.callee, scope);
    if (!callee.is(Value::Kind::kFunction)) {
      fail_render("call block needs a macro, got {}", type_name(callee));
    }
    CallArgs args = eval_args(call.args, scope);
    Scope call_scope(&scope);
    call_scope.set("caller", Value::function(Function{"caller", std::move(body)}));
    write(out, to_output(invoke(callee.as_function(), args, call_scope)));
    return Flow::kNormal;
  }

  // Renders a macro or call block body in a frame under `parent` with the arguments bound.
  // Macros get the caller's frame as parent (dynamic scoping, as the reference renderer does).
  Value run_signature_body(const Signature& signature, const Body& body, CallArgs& args,
                           Scope& parent, const std::string& what) {
    Scope local(&parent);
    bind_signature(signature, args, local, what);
    return Value::string(render_body(body, local));
  }

  Flow exec_node(const FilterBlockStmt& stmt, Scope& scope, std::string& out) {
    Value value = Value::string(render_body(stmt.body, scope));
    for (const FilterCall& filter : stmt.filters) {
      CallArgs args = eval_args(filter.args, scope);
      value = apply_filter(filter.name, value, args);
    }
    write(out, to_output(value));
    return Flow::kNormal;
  }

  Flow exec_node(const LoopControlStmt& stmt, Scope&, std::string&) {
    return stmt.is_break ? Flow::kBreak : Flow::kContinue;
  }

  // Binds call arguments to parameters like Python: positionals first, then keywords, then
  // defaults, which may refer to earlier parameters.
  void bind_signature(const Signature& signature, CallArgs& args, Scope& scope,
                      const std::string& what) {
    Object keyword = std::move(args.keyword);
    std::vector<std::pair<const std::string*, const Expr*>> pending_defaults;
    for (size_t i = 0; i < signature.params.size(); ++i) {
      const auto& [name, default_value] = signature.params[i];
      std::optional<Value> value;
      if (i < args.positional.size()) {
        value = args.positional[i];
      } else {
        auto it = std::find_if(keyword.begin(), keyword.end(),
                               [&name = name](const auto& member) { return member.first == name; });
        if (it != keyword.end()) {
          value = std::move(it->second);
          keyword.erase(it);
        }
      }
      if (!value && default_value) pending_defaults.emplace_back(&name, default_value.get());
      scope.set(name, value.value_or(Value()));
    }
    if (signature.reads_kwargs) {
      scope.set("kwargs", Value::object(std::move(keyword)));
    } else if (!keyword.empty()) {
      fail_render("{} takes no keyword argument '{}'", what, keyword.front().first);
    }
    if (signature.reads_varargs) {
      const size_t used = std::min(args.positional.size(), signature.params.size());
      scope.set("varargs",
                Value::array(Array(args.positional.begin() + used, args.positional.end())));
    } else if (args.positional.size() > signature.params.size()) {
      fail_render("{} takes at most {} argument(s), got {}", what, signature.params.size(),
                  args.positional.size());
    }
    for (const auto& [name, default_value] : pending_defaults) {
      scope.set(*name, eval(*default_value, scope));
    }
  }

  // ---- Expressions ----

  Value eval(const Expr& expr, Scope& scope) {
    try {
      charge_work(kExprWork);
      return std::visit([&](const auto& node) { return eval_node(node, scope); }, expr.node);
    } catch (const RenderFailure& failure) {
      fail("line {}: {}", expr.line, failure.what());
    }
  }

  Value eval_node(const Literal& node, Scope&) { return node.value; }
  Value eval_node(const Name& node, Scope& scope) { return scope.lookup(node.name); }

  Value eval_node(const ListLiteral& node, Scope& scope) {
    Array items;
    for (const auto& item : node.items)
      items.push_back(eval(*item, scope));
    return Value::array(std::move(items));
  }

  Value eval_node(const DictLiteral& node, Scope& scope) {
    Object members;
    for (const auto& [key_expr, value_expr] : node.items) {
      const Value key = eval(*key_expr, scope);
      if (!key.is_string()) fail_render("dict keys must be strings, got {}", type_name(key));
      set_member(members, key.as_string(), eval(*value_expr, scope));
    }
    return Value::object(std::move(members));
  }

  Value eval_node(const Attribute& node, Scope& scope) {
    return get_item(eval(*node.object, scope), Value::string(node.name));
  }

  Value eval_node(const Subscript& node, Scope& scope) {
    const Value object = eval(*node.object, scope);
    return get_item(object, eval(*node.index, scope));
  }

  Value eval_node(const Slice& node, Scope& scope) {
    const Value object = eval(*node.object, scope);
    auto part = [&](const ExprPtr& e) { return e ? eval(*e, scope) : Value(); };
    return slice(object, part(node.start), part(node.stop), part(node.step));
  }

  Value eval_node(const Call& node, Scope& scope) {
    // `object.name(...)`: a macro stored in a namespace or dict, else a built-in method.
    if (const auto* attribute = std::get_if<Attribute>(&node.callee->node)) {
      const Value object = eval(*attribute->object, scope);
      CallArgs args = eval_args(node.args, scope);
      const Value* member = object.find(attribute->name);
      if (member != nullptr && member->is(Value::Kind::kFunction)) {
        return invoke(member->as_function(), args, scope);
      }
      return call_method(object, attribute->name, args);
    }
    const Value callee = eval(*node.callee, scope);
    if (!callee.is(Value::Kind::kFunction)) {
      if (const auto* name = std::get_if<Name>(&node.callee->node); name && callee.is_undefined()) {
        fail_render("unknown function '{}'", name->name);
      }
      fail_render("{} is not callable", type_name(callee));
    }
    CallArgs args = eval_args(node.args, scope);
    return invoke(callee.as_function(), args, scope);
  }

  Value eval_node(const Filter& node, Scope& scope) {
    const Value operand = eval(*node.operand, scope);
    CallArgs args = eval_args(node.filter.args, scope);
    return apply_filter(node.filter.name, operand, args);
  }

  Value eval_node(const Test& node, Scope& scope) {
    const Value operand = eval(*node.operand, scope);
    CallArgs args = eval_args(node.args, scope);
    return Value::boolean(apply_test(node.name, operand, args) != node.negated);
  }

  Value eval_node(const Unary& node, Scope& scope) {
    return unary_op(node.op, eval(*node.operand, scope));
  }

  Value eval_node(const Binary& node, Scope& scope) {
    Value left = eval(*node.left, scope);
    if (node.op == BinaryOp::kAnd) return truthy(left) ? eval(*node.right, scope) : left;
    if (node.op == BinaryOp::kOr) return truthy(left) ? left : eval(*node.right, scope);
    return binary_op(node.op, left, eval(*node.right, scope));
  }

  Value eval_node(const Conditional& node, Scope& scope) {
    if (truthy(eval(*node.condition, scope))) return eval(*node.then_value, scope);
    return node.else_value ? eval(*node.else_value, scope) : Value();
  }

  CallArgs eval_args(const ArgList& list, Scope& scope) {
    CallArgs args;
    for (const auto& e : list.positional)
      args.positional.push_back(eval(*e, scope));
    if (list.positional_spread) {
      const Value spread = eval(*list.positional_spread, scope);
      if (!spread.is_array()) fail_render("'*' argument must be a list, got {}", type_name(spread));
      args.positional.insert(args.positional.end(), spread.as_array().begin(),
                             spread.as_array().end());
    }
    for (const auto& [name, e] : list.keyword)
      args.keyword.emplace_back(name, eval(*e, scope));
    if (list.keyword_spread) {
      const Value spread = eval(*list.keyword_spread, scope);
      if (!spread.is_object())
        fail_render("'**' argument must be a dict, got {}", type_name(spread));
      for (const auto& [name, value] : spread.as_object()) {
        if (find_member(args.keyword, name) != nullptr) {
          fail_render("got multiple values for keyword argument '{}'", name);
        }
        args.keyword.emplace_back(name, value);
      }
    }
    return args;
  }

  Value invoke(const Function& function, CallArgs& args, Scope& scope) {
    if (call_depth_ >= kMaxCallDepth) {
      fail_render("calls nest deeper than {} levels in '{}'", kMaxCallDepth, function.name);
    }
    charge_work(kStepWork);
    ++call_depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{call_depth_};
    return function.call(args, scope);
  }

  int call_depth_ = 0;
};

}  // namespace

std::string render_program(const Body& program, const nlohmann::ordered_json& context) {
  return Interpreter().render(program, context);
}

}  // namespace pagoda::jinja
