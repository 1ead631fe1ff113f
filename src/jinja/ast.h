// jinja/ast.h — syntax tree of a parsed chat template, and the parser entry.
//
// Owns: the Expr and Node trees and parse_template(), which lexes and parses a Jinja2
// source the way Jinja2 3.x does with trim_blocks=True and lstrip_blocks=True
// (jinja2/lexer.py tokeniter: newline normalisation, one trailing newline dropped,
// `{%-`/`-%}` stripping, `+` opt-outs, `{% raw %}`), then builds the tree
// (jinja2/parser.py precedence: condexpr < or < and < not < compare < +,- < ~ <
// *,/,//,% < ** < unary < filters/tests < postfix).
// Does not evaluate (jinja/eval.cpp). Unsupported statements (extends, block, include,
// import, call, filter, with) are parse errors naming the tag.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace specula::jinja {

// Nesting of blocks and expressions the parser accepts (bounds its recursion).
inline constexpr int kMaxParseDepth = 200;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,   // literal
  kName,      // name
  kList,      // args: items; name "tuple" for a tuple literal
  kDict,      // args: key0, value0, key1, value1, ...
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts allowed)
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs)
  kTest,      // args[0] is [not] name(args[1..])
  kUnary,     // name in {"-", "+", "not"}; args[0]
  kBinary,    // name in {+ - * / // % ** ~ and or}; args[0], args[1]
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (Python chaining)
  kCond,      // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0, col = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "not in"
  bool negated = false;          // kTest: `is not`
  int height = 1;                // 1 + tallest child (bounded by kMaxParseDepth)
};

// The variable a {% filter %} block's output reaches its filters in (a name no template
// can write: it has a space).
inline constexpr const char* kFilterBlockInput = "filter block";

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches: (cond or null for else, body)
  kFor,       // for targets in expr [if filter]: body [else else_body]
  kSet,       // set targets = expr, or set targets[0].attr = expr
  kSetBlock,  // set targets[0] %} body {% endset
  kFilterBlock,  // filter f(args) | g %} body {% endfilter: expr applies the filters to the body's output
  kMacro,     // macro targets[0](params = defaults): body
  kBreak,
  kContinue,
};

struct Node {
  NodeKind kind = NodeKind::kText;
  int line = 0, col = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // parallel to params; null when none
  bool uses_loop = false;         // kFor: the body or filter mentions `loop`
};

struct Template {
  Body body;
};

// Filter and test names the evaluator implements (jinja2 rejects unknown names when it
// compiles a template; so does parse_template).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

// Throws JinjaError("LINE:COL: what") on a syntax error.
std::unique_ptr<Template> parse_template(const std::string& source);

}  // namespace specula::jinja
