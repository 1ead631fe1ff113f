// jinja/eval.h — tree-walking evaluator for parsed chat templates.
//
// Owns: rendering a Template against a context dict with Jinja2 3.x semantics
// (scoping: a for-loop body gets a fresh scope per iteration, `if` none, a macro sees
// the template's top-level scope; default Undefined), the built-in filters, tests,
// string/dict methods and globals (range, namespace, dict, raise_exception,
// strftime_now) that chat templates use, and the limits that stop hostile templates.
// The Python text algorithms some filters need (printf-style %, textwrap, pprint, ...)
// are jinja/pytext.h's.
// `tojson` is transformers' (json.dumps(ensure_ascii=False, indent, separators,
// sort_keys)), not Jinja2's HTML-safe one.
// Does not lex or parse (jinja/parser.cpp) and does not know about chat messages.
#pragma once

#include <cstdint>
#include <string>

#include "jinja/ast.h"

namespace specula::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;   // rendered text
  int64_t max_string_bytes = int64_t{64} << 20;   // sum of all strings built while rendering
  int64_t max_loop_iterations = 1'000'000;      // all loops together (and range() length)
  int64_t max_steps = 10'000'000;               // expression evaluations and value walks
  int max_depth = 500;                          // nested evaluation (macro recursion)
};

// Renders `tpl` with the variables of `context` (a dict). Throws JinjaError.
// `untrusted` (optional) receives the byte ranges of the output that came from untrusted
// strings of the context (jinja/value.h Spans).
std::string render(const Template& tpl, const Value& context, const RenderLimits& limits,
                   Spans* untrusted = nullptr);

}  // namespace specula::jinja
