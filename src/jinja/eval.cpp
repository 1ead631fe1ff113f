// jinja/eval.cpp — evaluator, filters, tests, methods and globals for chat
// templates. See jinja/eval.h. Semantics are Jinja2 3.x's (jinja2/runtime.py,
// jinja2/filters.py, jinja2/tests.py) over CPython's str/list/dict behaviour; case
// mapping covers Latin, Greek and Cyrillic (jinja/value.h upper_cp/lower_cp).
#include "jinja/eval.h"

#include "jinja/pytext.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <ctime>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

namespace specula::jinja {
namespace {

// An error that already carries its template position.
class LocatedError : public JinjaError {
 public:
  using JinjaError::JinjaError;
};

enum class Flow { kNormal, kBreak, kContinue };

// jinja2 3.1's built-in filters (plus transformers' tojson) except urlize.
const char* const kFilters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "items", "join", "last",
    "length", "list", "lower", "map", "max", "min", "pprint", "random", "reject", "rejectattr", "replace", "reverse",
    "round", "safe", "select", "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "wordcount", "wordwrap", "xmlattr"};
// Each filter's parameters after the value, in order (jinja2 3.1.6's signatures; tojson is
// transformers'); "*": any arguments.
struct FilterParams {
  const char* filter;
  std::initializer_list<const char*> params;
};
const FilterParams kFilterParams[] = {
    {"abs", {}}, {"attr", {"name"}}, {"batch", {"linecount", "fill_with"}}, {"capitalize", {}}, {"center", {"width"}},
    {"count", {}}, {"d", {"default_value", "boolean"}}, {"default", {"default_value", "boolean"}},
    {"dictsort", {"case_sensitive", "by", "reverse"}}, {"e", {}}, {"escape", {}}, {"filesizeformat", {"binary"}},
    {"first", {}}, {"float", {"default"}}, {"forceescape", {}}, {"format", {"*"}},
    {"groupby", {"attribute", "default", "case_sensitive"}}, {"indent", {"width", "first", "blank"}},
    {"int", {"default", "base"}}, {"items", {}}, {"join", {"d", "attribute"}}, {"last", {}}, {"length", {}},
    {"list", {}}, {"lower", {}}, {"map", {"*"}}, {"max", {"case_sensitive", "attribute"}},
    {"min", {"case_sensitive", "attribute"}}, {"pprint", {}}, {"random", {}}, {"reject", {"*"}},
    {"rejectattr", {"*"}}, {"replace", {"old", "new", "count"}}, {"reverse", {}}, {"round", {"precision", "method"}},
    {"safe", {}}, {"select", {"*"}}, {"selectattr", {"*"}}, {"slice", {"slices", "fill_with"}},
    {"sort", {"reverse", "case_sensitive", "attribute"}}, {"string", {}}, {"striptags", {}},
    {"sum", {"attribute", "start"}}, {"title", {}}, {"tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}},
    {"trim", {"chars"}}, {"truncate", {"length", "killwords", "end", "leeway"}}, {"unique", {"case_sensitive", "attribute"}},
    {"upper", {}}, {"urlencode", {}}, {"wordcount", {}},
    {"wordwrap", {"width", "break_long_words", "wrapstring", "break_on_hyphens"}}, {"xmlattr", {"autospace"}}};

// jinja2 3.1's built-in tests, all of them.
const char* const kTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false", "filter",
    "float", "ge", ">=", "gt", "greaterthan", ">", "in", "integer", "iterable", "le", "<=", "lower", "lt", "lessthan",
    "<", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined",
    "upper"};
const char* const kStringMethods[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "split", "upper", "lower",
                                      "replace", "title", "capitalize", "find", "count", "join"};
const char* const kDictMethods[] = {"get", "items", "keys", "values"};

template <size_t N>
bool contains(const char* const (&names)[N], const std::string& name) {
  for (const char* n : names) {
    if (name == n) return true;
  }
  return false;
}

[[noreturn]] void fail(const std::string& what) { throw JinjaError(what); }

const Value kComma = Value::string(",");

// Python's argument binding: too many positional arguments, unknown keywords and a
// parameter given twice are errors.
void check_filter_args(const std::string& name, const List& args, const KwArgs& kw) {
  for (const FilterParams& f : kFilterParams) {
    if (name != f.filter) continue;
    const size_t n = f.params.size();
    if (n == 1 && std::string_view(*f.params.begin()) == "*") return;
    if (args.size() > n) {
      fail("takes at most " + std::to_string(n) + " argument" + (n == 1 ? "" : "s") + ", " + std::to_string(args.size()) +
           " given");
    }
    for (const auto& [k, x] : kw) {
      const auto it = std::find_if(f.params.begin(), f.params.end(), [&](const char* p) { return k == p; });
      if (it == f.params.end()) fail("got an unexpected keyword argument '" + k + "'");
      if (static_cast<size_t>(it - f.params.begin()) < args.size()) fail("got multiple values for argument '" + k + "'");
    }
    return;
  }
}

// Throws the Undefined's own message when it is used in a way Undefined forbids.
void check_defined(const Value& v) {
  if (v.is_undefined()) fail(v.s ? *v.s : "value is undefined");
}

// Argument `index` (positional) or `name` (keyword) of a filter/test/method call.
const Value* arg(const List& args, const KwArgs& kw, size_t index, const char* name) {
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return index < args.size() ? &args[index] : nullptr;
}

int64_t int_arg(const Value* v, int64_t fallback, const char* what) {
  if (v == nullptr || v->is_none()) return fallback;
  if (!v->is_integral()) fail(std::string(what) + ": expected an integer, got " + v->type_name());
  return v->as_int();
}

bool is_cased(uint32_t cp) { return upper_cp(cp) != cp || lower_cp(cp) != cp || cp == 0xDF; }

// Python str.capitalize(): first character upper, the rest lower.
std::string capitalize(const std::string& s) {
  const auto cps = utf8_decode(s);
  std::string out;
  for (size_t k = 0; k < cps.size(); ++k) {
    std::string one;
    utf8_append(cps[k], one);
    out += k == 0 ? utf8_upper(one) : utf8_lower(one);
  }
  return out;
}

// Python str.title(): a cased letter after an uncased character starts a word.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (uint32_t cp : utf8_decode(s)) {
    std::string one;
    utf8_append(cp, one);
    out += prev_cased ? utf8_lower(one) : utf8_upper(one);
    prev_cased = is_cased(cp);
  }
  return out;
}

// jinja2's title filter: words start after runs of [-\s({\[<].
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (size_t pos = 0; pos < s.size();) {
    const size_t sp = py_space_len(s, pos);
    const char c = s[pos];
    if (sp > 0 || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      const size_t len = sp > 0 ? sp : 1;
      out.append(s, pos, len);
      pos += len;
      word_start = true;
      continue;
    }
    size_t len = 1;
    while (pos + len < s.size() && (static_cast<unsigned char>(s[pos + len]) >> 6) == 0x2) ++len;
    const std::string one = s.substr(pos, len);
    out += word_start ? utf8_upper(one) : utf8_lower(one);
    word_start = false;
    pos += len;
  }
  return out;
}

List py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  List out;
  if (sep == nullptr || sep->is_none()) {
    size_t pos = 0;
    while (true) {
      for (size_t len; (len = py_space_len(s, pos)) > 0;) pos += len;
      if (pos >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(Value::string(py_strip(s.substr(pos), false, true)));
        break;
      }
      size_t end = pos;
      while (end < s.size() && py_space_len(s, end) == 0) ++end;
      out.push_back(Value::string(s.substr(pos, end - pos)));
      pos = end;
    }
    return out;
  }
  if (!sep->is_string()) fail("split: separator must be a string");
  const std::string& d = sep->str_ref();
  if (d.empty()) fail("split: empty separator");
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(d, pos);
    if (hit == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(Value::string(s.substr(pos)));
      return out;
    }
    out.push_back(Value::string(s.substr(pos, hit - pos)));
    pos = hit + d.size();
  }
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (from.empty()) {
    for (std::string_view c : utf8_chars(s)) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += c;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos || (count >= 0 && done >= count)) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
    charge_bytes(static_cast<int64_t>(to.size()));
  }
  out.append(s, pos);
  return out;
}

// Python slice index list for a sequence of length n.
std::vector<int64_t> slice_indices(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v) {
  const auto get = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_integral()) fail(std::string("slice ") + what + " must be an integer or None");
    return v.as_int();
  };
  const int64_t step = get(step_v, "step").value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  const int64_t lower = step > 0 ? 0 : -1;
  const int64_t upper = step > 0 ? n : n - 1;
  const auto clamp = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x) return dflt;
    int64_t v = *x;
    if (v < 0) {
      v += n;
      if (v < lower) v = lower;
    } else if (v > upper) {
      v = upper;
    }
    return v;
  };
  const int64_t start = clamp(get(start_v, "start"), step > 0 ? lower : upper);
  const int64_t stop = clamp(get(stop_v, "stop"), step > 0 ? upper : lower);
  std::vector<int64_t> out;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) out.push_back(k);
  return out;
}

// Checked int64 arithmetic (Python ints are unbounded; overflow is an error here).
int64_t add_ck(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail("integer overflow");
  return r;
}
int64_t sub_ck(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) fail("integer overflow");
  return r;
}
int64_t mul_ck(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail("integer overflow");
  return r;
}

// A filter's or test's error names it (unless the message already starts with the name).
[[noreturn]] void rethrow_named(const char* kind, const std::string& name, const JinjaError& e) {
  const std::string what = e.what();
  if (what.rfind(name + ":", 0) == 0 || what.rfind(std::string(kind) + " '" + name + "'", 0) == 0) throw;
  throw JinjaError(std::string(kind) + " '" + name + "': " + what);
}

// A string result that is a Markup when `from` is one (markupsafe's methods keep the type).
Value string_like(const Value& from, std::string s) {
  Value r = Value::string(std::move(s));
  r.markup = from.is_string() && from.markup;
  return r;
}

}  // namespace

bool is_known_filter(const std::string& name) { return contains(kFilters, name); }
bool is_known_test(const std::string& name) { return contains(kTests, name); }

class Interpreter {
 public:
  explicit Interpreter(const RenderLimits& limits) : limits_(limits) {
    budget_.steps = limits.max_steps;
    budget_.bytes = limits.max_string_bytes;
  }

  // `spans` (may be null) receives the output's untrusted byte ranges.
  std::string run(const Template& tpl, const Value& context, Spans* spans) {
    struct BudgetScope {
      explicit BudgetScope(Budget* b) { set_thread_budget(b); }
      ~BudgetScope() { set_thread_budget(nullptr); }
    } scope(&budget_);
    frames_.emplace_back();
    if (context.is_dict()) {
      for (const auto& [k, v] : context.dict->items) frames_[0].set(k, v);
    }
    std::string out;
    out_ = &out;
    out_spans_ = spans;
    exec_body(tpl.body);
    return out;
  }

 private:
  using Frame = Dict;  // a scope's variables (few: linear lookup is cheapest)

  struct DepthGuard {
    explicit DepthGuard(Interpreter& in) : in(in) {
      if (++in.depth_ > in.limits_.max_depth) fail("recursion deeper than " + std::to_string(in.limits_.max_depth));
    }
    ~DepthGuard() { --in.depth_; }
    Interpreter& in;
  };

  // ---- output and scopes ----

  // Appends output; `from` is the value it was printed from (its untrusted ranges go to
  // the output's), null for the template's own text.
  void emit(const std::string& s, const Value* from = nullptr) {
    if (out_->size() + s.size() > limits_.max_output_bytes) {
      fail("output larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
    }
    if (from != nullptr && out_spans_ != nullptr) append_spans(*out_spans_, *from, s.size(), out_->size());
    *out_ += s;
  }

  Value lookup(const std::string& name) {
    for (size_t k = frames_.size(); k-- > floor_;) {
      if (const Value* v = frames_[k].find(name)) return *v;
    }
    if (floor_ > 0) {
      if (const Value* v = frames_[0].find(name)) return *v;
    }
    Value g = global(name);
    if (!g.is_undefined()) return g;
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const std::string& name, Value v) { frames_.back().set(name, std::move(v)); }

  void count_iteration() {
    if (++iterations_ > limits_.max_loop_iterations) {
      fail("more than " + std::to_string(limits_.max_loop_iterations) + " loop iterations");
    }
  }

  // ---- statements ----

  Flow exec_body(const Body& body) {
    for (const auto& n : body) {
      const Flow f = exec(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Node& n) {
    DepthGuard guard(*this);
    try {
      return exec_inner(n);
    } catch (const LocatedError&) {
      throw;
    } catch (const JinjaError& e) {
      throw LocatedError(std::to_string(n.line) + ":" + std::to_string(n.col) + ": " + e.what());
    }
  }

  Flow exec_inner(const Node& n) {
    charge_steps(1);
    switch (n.kind) {
      case NodeKind::kText: emit(n.text); return Flow::kNormal;
      case NodeKind::kOutput: {
        const Value v = eval(*n.expr);
        emit(v.is_string() ? v.str_ref() : to_str(v), &v);
        return Flow::kNormal;
      }
      case NodeKind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (!cond || truthy(eval(*cond))) return exec_body(body);
        }
        return Flow::kNormal;
      case NodeKind::kFor: return exec_for(n);
      case NodeKind::kSet: {
        Value v = eval(*n.expr);
        if (!n.attr.empty()) {
          Value target = lookup(n.targets[0]);
          if (!target.is_dict() || !target.dict->is_namespace) {
            fail("cannot assign attribute '" + n.attr + "' on a non-namespace object");
          }
          if (v.has_namespace) fail("a namespace cannot hold a namespace");
          target.dict->set(n.attr, std::move(v));
        } else if (n.targets.size() == 1) {
          assign(n.targets[0], std::move(v));
        } else {
          unpack(n.targets, v);
        }
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock: assign(n.targets[0], capture(n.body)); return Flow::kNormal;
      case NodeKind::kFilterBlock: {
        assign(kFilterBlockInput, capture(n.body));
        const Value v = eval(*n.expr);
        emit(v.is_string() ? v.str_ref() : to_str(v), &v);
        return Flow::kNormal;
      }
      case NodeKind::kMacro: {
        const Node* macro = &n;
        assign(n.targets[0], Value::callable(n.targets[0], [macro](Interpreter& in, List& args, KwArgs& kw) {
                 return in.call_macro(*macro, args, kw);
               }));
        return Flow::kNormal;
      }
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  // The output of `body` as a string value, with its untrusted ranges.
  Value capture(const Body& body) {
    std::string buf;
    Spans spans;
    std::string* saved = out_;
    Spans* saved_spans = out_spans_;
    out_ = &buf;
    out_spans_ = &spans;
    exec_body(body);
    out_ = saved;
    out_spans_ = saved_spans;
    return Value::string_with_spans(std::move(buf), std::move(spans));
  }

  void unpack(const std::vector<std::string>& targets, const Value& v) {
    if (!v.is_list()) fail("cannot unpack " + v.type_name() + " into " + std::to_string(targets.size()) + " names");
    if (v.list->size() != targets.size()) {
      fail("expected " + std::to_string(targets.size()) + " values to unpack, got " + std::to_string(v.list->size()));
    }
    for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], (*v.list)[k]);
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& item) {
    if (targets.size() == 1) {
      assign(targets[0], item);
    } else {
      unpack(targets, item);
    }
  }

  // The items a for-loop (or an iterating filter) walks over.
  static List iterate(const Value& v) {
    switch (v.kind) {
      case Value::Kind::kUndefined: return {};
      case Value::Kind::kList: return *v.list;
      case Value::Kind::kDict: {
        if (v.dict->is_namespace) break;
        List keys;
        for (const auto& kv : v.dict->items) keys.push_back(v.dict->key_value(kv.first));
        return keys;
      }
      case Value::Kind::kString: {  // characters keep their untrusted ranges
        List chars;
        const std::string& str = v.str_ref();
        for (std::string_view c : utf8_chars(str))
          chars.push_back(substr_value(v, static_cast<size_t>(c.data() - str.data()), c.size()));
        return chars;
      }
      default: break;
    }
    fail("'" + v.type_name() + "' object is not iterable");
  }

  // The `loop` variable of iteration k (built only when the body mentions `loop`).
  static Value loop_object(const List& items, int64_t k) {
    const auto len = static_cast<int64_t>(items.size());
    Dict loop;
    loop.items.reserve(12);
    const auto add = [&](const char* key, Value v) { loop.items.emplace_back(key, std::move(v)); };
    add("index", Value::integer(k + 1));
    add("index0", Value::integer(k));
    add("revindex", Value::integer(len - k));
    add("revindex0", Value::integer(len - k - 1));
    add("first", Value::boolean(k == 0));
    add("last", Value::boolean(k == len - 1));
    add("length", Value::integer(len));
    add("depth", Value::integer(1));
    add("depth0", Value::integer(0));
    add("previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item"));
    add("nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item"));
    add("cycle", Value::callable("cycle", [k](Interpreter&, List& args, KwArgs&) {
          if (args.empty()) fail("loop.cycle: no items given");
          return args[static_cast<size_t>(k) % args.size()];
        }));
    return Value::make_dict(std::move(loop));
  }

  Flow exec_for(const Node& n) {
    const Value seq = eval(*n.expr);
    // Lists are walked in place (no copy); other iterables are materialised.
    std::shared_ptr<const List> items_ptr = seq.is_list() ? seq.list : std::make_shared<const List>(iterate(seq));
    if (n.filter) {
      List kept;
      for (const Value& item : *items_ptr) {
        count_iteration();
        frames_.emplace_back();
        bind_targets(n.targets, item);
        const bool keep = truthy(eval(*n.filter));
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items_ptr = std::make_shared<const List>(std::move(kept));
    }
    const List& items = *items_ptr;
    if (items.empty()) return exec_body(n.else_body);
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      count_iteration();
      frames_.emplace_back();
      bind_targets(n.targets, items[static_cast<size_t>(k)]);
      if (n.uses_loop) assign("loop", loop_object(items, k));
      const Flow f = exec_body(n.body);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

 public:
  Value call_macro(const Node& m, List& args, KwArgs& kw) {
    if (args.size() > m.params.size()) {
      fail("macro '" + m.targets[0] + "' takes " + std::to_string(m.params.size()) + " arguments, " +
           std::to_string(args.size()) + " given");
    }
    const size_t saved_floor = floor_;
    floor_ = frames_.size();
    frames_.emplace_back();
    for (const auto& [k, v] : kw) {
      if (std::find(m.params.begin(), m.params.end(), k) == m.params.end()) {
        fail("macro '" + m.targets[0] + "' has no argument '" + k + "'");
      }
    }
    for (size_t p = 0; p < m.params.size(); ++p) {
      const Value* given = arg(args, kw, p, m.params[p].c_str());
      if (given != nullptr) {
        assign(m.params[p], *given);
      } else if (m.defaults[p]) {
        assign(m.params[p], eval(*m.defaults[p]));
      } else {
        assign(m.params[p], Value::undefined("'" + m.params[p] + "' is undefined"));
      }
    }
    Value text = capture(m.body);
    frames_.pop_back();
    floor_ = saved_floor;
    return text;
  }

 private:
  // ---- expressions ----

  Value eval(const Expr& e) {
    DepthGuard guard(*this);
    charge_steps(1);
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: return lookup(e.name);
      case ExprKind::kList: {
        List items;
        items.reserve(e.args.size());
        for (const auto& a : e.args) items.push_back(eval(*a));
        return Value::make_list(std::move(items), e.name == "tuple");
      }
      case ExprKind::kDict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          if (!key.is_string()) fail("dict keys must be strings, got " + key.type_name());
          if (key.untrusted) d.keys_untrusted = true;
          d.set(key.str_ref(), eval(*e.args[k + 1]));
        }
        return Value::make_dict(std::move(d));
      }
      case ExprKind::kGetAttr: return get_attr(eval(*e.args[0]), e.name);
      case ExprKind::kGetItem: {
        Value obj = eval(*e.args[0]);
        Value key = eval(*e.args[1]);
        Value r = get_item(obj, key);
        return obj.is_string() && holds_untrusted(obj) ? taint_fresh(std::move(r)) : r;
      }
      case ExprKind::kSlice: {
        Value obj = eval(*e.args[0]);
        check_defined(obj);
        Value parts[3];
        for (int k = 0; k < 3; ++k) parts[k] = e.args[1 + k] ? eval(*e.args[1 + k]) : Value::none();
        if (obj.is_list()) {
          List out;
          for (int64_t k : slice_indices(static_cast<int64_t>(obj.list->size()), parts[0], parts[1], parts[2])) {
            out.push_back((*obj.list)[static_cast<size_t>(k)]);
          }
          return Value::make_list(std::move(out), obj.is_tuple);
        }
        if (obj.is_string()) {
          const auto chars = utf8_chars(obj.str_ref());
          std::string out;
          for (int64_t k : slice_indices(static_cast<int64_t>(chars.size()), parts[0], parts[1], parts[2])) {
            out += chars[static_cast<size_t>(k)];
          }
          Value r = string_like(obj, std::move(out));
          return holds_untrusted(obj) ? taint_fresh(std::move(r)) : r;
        }
        fail("'" + obj.type_name() + "' object is not subscriptable");
      }
      case ExprKind::kCall: return eval_call(e);
      case ExprKind::kFilter: {
        Value v = eval(*e.args[0]);
        List args;
        KwArgs kw;
        eval_args(e, args, kw);
        Value r;
        try {
          check_filter_args(e.name, args, kw);
          r = apply_filter(e.name, v, args, kw);
        } catch (const LocatedError&) {
          throw;
        } catch (const JinjaError& err) {
          rethrow_named("filter", e.name, err);
        }
        return any_untrusted(v, args, kw) ? taint_fresh(std::move(r)) : r;
      }
      case ExprKind::kTest: {
        Value v = eval(*e.args[0]);
        List args;
        KwArgs kw;
        eval_args(e, args, kw);
        try {
          return Value::boolean(apply_test(e.name, v, args) != e.negated);
        } catch (const LocatedError&) {
          throw;
        } catch (const JinjaError& err) {
          rethrow_named("test", e.name, err);
        }
      }
      case ExprKind::kUnary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        check_defined(v);
        if (!v.is_number()) fail("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
        if (e.name == "+") return v.kind == Value::Kind::kBool ? Value::integer(v.as_int()) : v;
        if (v.kind == Value::Kind::kFloat) return Value::number(-v.f);
        return Value::integer(sub_ck(0, v.as_int()));
      }
      case ExprKind::kBinary: {
        if (e.name == "and") {
          Value a = eval(*e.args[0]);
          return truthy(a) ? eval(*e.args[1]) : a;
        }
        if (e.name == "or") {
          Value a = eval(*e.args[0]);
          return truthy(a) ? a : eval(*e.args[1]);
        }
        Value a = eval(*e.args[0]);
        Value b = eval(*e.args[1]);
        return binary(e.name, a, b);
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.args[k + 1]);
          if (!compare(e.ops[k], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("conditional expression without else");
    }
    return Value::undefined();
  }

  void eval_args(const Expr& e, List& args, KwArgs& kw) {
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    for (const auto& [name, x] : e.kwargs) kw.emplace_back(name, eval(*x));
  }

  static bool any_untrusted(const Value& v, const List& args, const KwArgs& kw) {
    if (holds_untrusted(v)) return true;
    for (const Value& a : args)
      if (holds_untrusted(a)) return true;
    for (const auto& [k, a] : kw)
      if (holds_untrusted(a)) return true;
    return false;
  }

  // Strings made by methods and globals from untrusted inputs are untrusted; a macro's
  // output keeps its exact ranges (it is a captured block).
  Value eval_call(const Expr& e) {
    Value obj;
    List args;
    KwArgs kw;
    Value r = eval_call_plain(e, &obj, args, kw);
    return any_untrusted(obj, args, kw) ? taint_fresh(std::move(r)) : r;
  }

  Value eval_call_plain(const Expr& e, Value* receiver, List& args, KwArgs& kw) {
    const Expr& callee = *e.args[0];
    if (callee.kind == ExprKind::kGetAttr) {
      Value& obj = *receiver;
      obj = eval(*callee.args[0]);
      eval_args(e, args, kw);
      if (obj.is_string() && contains(kStringMethods, callee.name)) return string_method(obj, callee.name, args, kw);
      if (obj.is_dict() && !obj.dict->is_namespace && contains(kDictMethods, callee.name)) {
        return dict_method(obj, callee.name, args, kw);
      }
      return call(get_attr(obj, callee.name), args, kw);
    }
    *receiver = eval(callee);  // a bound method holds its receiver's untrusted flag
    eval_args(e, args, kw);
    return call(*receiver, args, kw);
  }

  Value call(const Value& fn, List& args, KwArgs& kw) {
    check_defined(fn);
    if (fn.kind != Value::Kind::kCallable) fail("'" + fn.type_name() + "' object is not callable");
    return fn.fn->fn(*this, args, kw);
  }

  Value get_attr(const Value& obj, const std::string& name) {
    check_defined(obj);
    if (obj.is_dict()) {
      if (!obj.dict->is_namespace && contains(kDictMethods, name)) return bound_method(obj, name, false);
      if (const Value* v = obj.dict->find(name)) return *v;
    } else if (obj.is_string() && contains(kStringMethods, name)) {
      return bound_method(obj, name, true);
    } else if (obj.is_group && (name == "grouper" || name == "list")) {
      return (*obj.list)[name == "grouper" ? 0 : 1];
    }
    return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }

  Value bound_method(const Value& obj, const std::string& name, bool is_string) {
    Value m = Value::callable(name, [obj, name, is_string](Interpreter& in, List& args, KwArgs& kw) {
      return is_string ? in.string_method(obj, name, args, kw) : in.dict_method(obj, name, args, kw);
    });
    m.untrusted = holds_untrusted(obj);
    return m;
  }

  // Bytes [a, a + n) of string value v, keeping its untrusted ranges.
  static Value substr_value(const Value& v, size_t a, size_t n) {
    std::string text = v.str_ref().substr(a, n);
    if (!v.spans) return Value::string(std::move(text));
    Spans out;
    for (const auto& [b, e] : *v.spans) {
      const size_t lo = std::max(b, a), hi = std::min(e, a + n);
      if (lo < hi) out.emplace_back(lo - a, hi - a);
    }
    return Value::string_with_spans(std::move(text), std::move(out));
  }
  // strip/lstrip/rstrip/trim of a string value (chars: null for whitespace), keeping its
  // untrusted ranges: the result is a substring.
  static Value strip_value(const Value& v, const std::string* chars, bool left, bool right) {
    const std::string& s = v.str_ref();
    auto strip = [&](bool l, bool r) { return chars ? py_strip_chars(s, *chars, l, r) : py_strip(s, l, r); };
    const std::string both = strip(left, right);
    const size_t a = left ? s.size() - strip(true, false).size() : 0;
    Value r = substr_value(v, a, both.size());
    r.markup = v.markup;  // Markup.strip() is a Markup
    return r;
  }

  Value get_item(const Value& obj, const Value& key) {
    check_defined(obj);
    if (obj.is_dict() && key.is_string()) {
      if (const Value* v = obj.dict->find(key.str_ref())) return *v;
    } else if (obj.is_group && key.is_string() && (key.str_ref() == "grouper" || key.str_ref() == "list")) {
      return (*obj.list)[key.str_ref() == "grouper" ? 0 : 1];
    } else if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
      const bool is_list = obj.is_list();
      std::vector<std::string_view> chars;
      if (!is_list) chars = utf8_chars(obj.str_ref());
      const auto n = static_cast<int64_t>(is_list ? obj.list->size() : chars.size());
      int64_t k = key.as_int();
      if (k < 0) k += n;
      if (k >= 0 && k < n) {
        return is_list ? (*obj.list)[static_cast<size_t>(k)] : string_like(obj, std::string(chars[static_cast<size_t>(k)]));
      }
    }
    return Value::undefined("'" + obj.type_name() + " object' has no item " + repr(key));
  }

  // Attribute path "a.b.0" for map/selectattr/sort/join (jinja2 make_attrgetter).
  Value attr_path(const Value& item, const std::string& path) {
    Value cur = item;
    size_t pos = 0;
    while (true) {
      const size_t dot = path.find('.', pos);
      const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
      const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (cur.is_undefined()) return cur;
      cur = numeric ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::string(part));
      if (dot == std::string::npos) return cur;
      pos = dot + 1;
    }
  }

  // ---- operators ----

  // Fails before building a string that the remaining string budget cannot hold.
  void reserve_bytes(size_t n) const {
    if (static_cast<int64_t>(n) > budget_.bytes) fail("string memory limit exceeded");
  }

  // Concatenation keeps each side's untrusted ranges.
  static Value concat(const Value& a, std::string x, const Value& b, const std::string& y) {
    Spans spans;
    append_spans(spans, a, x.size(), 0);
    append_spans(spans, b, y.size(), x.size());
    x += y;
    return Value::string_with_spans(std::move(x), std::move(spans));
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
      std::string x = to_str(a);
      const std::string y = to_str(b);
      reserve_bytes(x.size() + y.size());
      return concat(a, std::move(x), b, y);
    }
    if (op == "+" && a.is_string() && b.is_string() && !a.markup && !b.markup) {
      reserve_bytes(a.str_ref().size() + b.str_ref().size());
      return concat(a, a.str_ref(), b, b.str_ref());
    }
    Value r;
    if (op == "+" && a.is_string() && b.is_string()) {
      // Markup + str and str + Markup escape the plain side (markupsafe __add__/__radd__).
      const std::string x = a.markup ? a.str_ref() : html_escape(a.str_ref());
      const std::string y = b.markup ? b.str_ref() : html_escape(b.str_ref());
      reserve_bytes(x.size() + y.size());
      r = Value::markup_string(x + y);
    } else if (op == "%" && a.is_string()) {
      // printf-style formatting; str(Undefined) is "" there, so no defined check first
      r = string_like(a, percent_format(a.str_ref(), b, a.markup));
    } else {
      r = binary_plain(op, a, b);
    }
    return holds_untrusted(a) || holds_untrusted(b) ? taint_fresh(std::move(r)) : r;
  }

  Value binary_plain(const std::string& op, const Value& a, const Value& b) {
    check_defined(a);
    check_defined(b);
    const bool ints = a.is_integral() && b.is_integral();
    const bool nums = a.is_number() && b.is_number();
    if (op == "+") {
      if (ints) return Value::integer(add_ck(a.as_int(), b.as_int()));
      if (nums) return Value::number(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        reserve_bytes(a.str_ref().size() + b.str_ref().size());
        return Value::string(a.str_ref() + b.str_ref());
      }
      if (a.is_list() && b.is_list()) {
        List out = *a.list;
        out.insert(out.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(out), a.is_tuple && b.is_tuple);
      }
    } else if (op == "-") {
      if (ints) return Value::integer(sub_ck(a.as_int(), b.as_int()));
      if (nums) return Value::number(a.as_double() - b.as_double());
    } else if (op == "*") {
      if (ints) return Value::integer(mul_ck(a.as_int(), b.as_int()));
      if (nums) return Value::number(a.as_double() * b.as_double());
      const Value& seq = a.is_integral() ? b : a;
      const Value& times = a.is_integral() ? a : b;
      if (times.is_integral() && (seq.is_string() || seq.is_list())) {
        const int64_t n = std::max<int64_t>(0, times.as_int());
        if (seq.is_string()) {
          const auto total = static_cast<double>(seq.str_ref().size()) * static_cast<double>(n);
          if (total > static_cast<double>(limits_.max_output_bytes)) fail("string repetition too large");
          std::string out;
          for (int64_t k = 0; k < n; ++k) out += seq.str_ref();
          return string_like(seq, std::move(out));
        }
        if (static_cast<double>(seq.list->size()) * static_cast<double>(n) > static_cast<double>(limits_.max_loop_iterations)) {
          fail("list repetition too large");
        }
        List out;
        for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
        return Value::make_list(std::move(out), seq.is_tuple);
      }
    } else if (op == "/") {
      if (nums) {
        if (b.as_double() == 0) fail("division by zero");
        return Value::number(a.as_double() / b.as_double());
      }
    } else if (op == "//" || op == "%") {
      if (nums) {
        if (b.as_double() == 0) fail(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
        if (ints) {
          const int64_t x = a.as_int(), y = b.as_int();
          if (x == INT64_MIN && y == -1) fail("integer overflow");
          int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) {
            --q;
            m += y;
          }
          return Value::integer(op == "//" ? q : m);
        }
        const double x = a.as_double(), y = b.as_double();
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::number(op == "//" ? std::floor(x / y) : m);
      }
    } else if (op == "**") {
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), result = 1;
        for (int64_t e = b.as_int(); e > 0; e >>= 1) {
          if (e & 1) result = mul_ck(result, base);
          if (e > 1) base = mul_ck(base, base);
        }
        return Value::integer(result);
      }
      if (nums) {
        if (a.as_double() == 0 && b.as_double() < 0) fail("0.0 cannot be raised to a negative power");
        return Value::number(std::pow(a.as_double(), b.as_double()));
      }
    }
    // CPython's messages: str and list concatenation name the other operand's type.
    if (op == "+" && a.is_string()) fail("can only concatenate str (not \"" + b.type_name() + "\") to str");
    if (op == "+" && a.is_list()) fail("can only concatenate list (not \"" + b.type_name() + "\") to list");
    fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  }

  static bool in(const Value& needle, const Value& hay) {
    switch (hay.kind) {
      case Value::Kind::kUndefined: return false;
      case Value::Kind::kString:
        if (!needle.is_string()) fail("'in <string>' requires string as left operand, not " + needle.type_name());
        return hay.str_ref().find(needle.str_ref()) != std::string::npos;
      case Value::Kind::kList:
        for (const Value& x : *hay.list) {
          if (equals(needle, x)) return true;
        }
        return false;
      case Value::Kind::kDict:
        if (hay.dict->is_namespace) break;
        return needle.is_string() && hay.dict->find(needle.str_ref()) != nullptr;
      default: break;
    }
    fail("argument of type '" + hay.type_name() + "' is not iterable");
  }

  static bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return in(a, b);
    if (op == "not in") return !in(a, b);
    check_defined(a);
    check_defined(b);
    if (op == "<") return less_than(a, b);
    if (op == ">") return less_than(b, a);
    if (op == "<=") return !less_than(b, a);
    return !less_than(a, b);  // ">="
  }

  // ---- globals ----

  Value global(const std::string& name) {
    if (name == "range") {
      return Value::callable(name, [](Interpreter& in, List& args, KwArgs&) {
        if (args.empty() || args.size() > 3) fail("range expected 1 to 3 arguments");
        for (const Value& a : args) {
          if (!a.is_integral()) fail("range: '" + a.type_name() + "' object cannot be interpreted as an integer");
        }
        const int64_t start = args.size() == 1 ? 0 : args[0].as_int();
        const int64_t stop = args.size() == 1 ? args[0].as_int() : args[1].as_int();
        const int64_t step = args.size() == 3 ? args[2].as_int() : 1;
        if (step == 0) fail("range() arg 3 must not be zero");
        const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
        if (count > static_cast<double>(in.limits_.max_loop_iterations)) {
          fail("range of " + float_repr(count) + " items exceeds the loop limit");
        }
        List out;
        for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) out.push_back(Value::integer(start + k * step));
        return Value::make_list(std::move(out));
      });
    }
    if (name == "namespace" || name == "dict") {
      const bool ns = name == "namespace";
      return Value::callable(name, [ns](Interpreter&, List& args, KwArgs& kw) {
        Dict d;
        d.is_namespace = ns;
        for (const Value& a : args) {
          if (!a.is_dict() || a.dict->is_namespace) fail("namespace()/dict() positional argument must be a dict");
          d.keys_untrusted = d.keys_untrusted || a.dict->keys_untrusted;
          for (const auto& [k, v] : a.dict->items) d.set(k, v);
        }
        for (auto& [k, v] : kw) {
          if (ns && v.has_namespace) fail("a namespace cannot hold a namespace");
          d.set(k, v);
        }
        return Value::make_dict(std::move(d));
      });
    }
    if (name == "raise_exception") {
      return Value::callable(name, [](Interpreter&, List& args, KwArgs&) -> Value {
        fail("raise_exception: " + (args.empty() ? std::string() : to_str(args[0])));
      });
    }
    if (name == "strftime_now") {
      return Value::callable(name, [](Interpreter&, List& args, KwArgs&) {
        if (args.empty() || !args[0].is_string()) fail("strftime_now expects a format string");
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[256];
        const size_t n = std::strftime(buf, sizeof(buf), args[0].str_ref().c_str(), &tm);
        return Value::string(std::string(buf, n));
      });
    }
    return Value::undefined();
  }

  // ---- methods ----

  Value string_method(const Value& obj, const std::string& name, List& args, KwArgs& kw) {
    const std::string& s = obj.str_ref();
    const Value* a0 = arg(args, kw, 0, "__0");
    const auto str_arg = [&](const Value* v, const char* what) -> const std::string& {
      if (v == nullptr || !v->is_string()) fail(std::string("str.") + name + ": " + what + " must be a string");
      return v->str_ref();
    };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool left = name != "rstrip", right = name != "lstrip";
      if (a0 == nullptr || a0->is_none()) return strip_value(obj, nullptr, left, right);
      return strip_value(obj, &str_arg(a0, "chars"), left, right);
    }
    if (name == "startswith" || name == "endswith") {
      if (a0 == nullptr) fail("str." + name + " expects a prefix");
      List options = a0->is_list() ? *a0->list : List{*a0};
      for (const Value& o : options) {
        const std::string& p = str_arg(&o, "prefix");
        const bool hit = name == "startswith" ? s.compare(0, p.size(), p) == 0
                                              : (s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0);
        if (hit) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "split") {
      return Value::make_list(py_split(s, arg(args, kw, 0, "sep"), int_arg(arg(args, kw, 1, "maxsplit"), -1, "split")));
    }
    if (name == "upper") return string_like(obj, utf8_upper(s));
    if (name == "lower") return string_like(obj, utf8_lower(s));
    if (name == "title") return string_like(obj, py_title(s));
    if (name == "capitalize") return string_like(obj, capitalize(s));
    if (name == "replace") {
      const Value* new_v = arg(args, kw, 1, "__1");
      std::string to = str_arg(new_v, "new");
      if (obj.markup && !new_v->markup) to = html_escape(to);  // Markup.replace escapes the new text
      return string_like(obj, py_replace(s, str_arg(a0, "old"), to, int_arg(arg(args, kw, 2, "count"), -1, "replace")));
    }
    if (name == "find") {
      const size_t hit = s.find(str_arg(a0, "sub"));
      return Value::integer(hit == std::string::npos ? -1 : static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, hit))));
    }
    if (name == "count") {
      const std::string& sub = str_arg(a0, "sub");
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
      return Value::integer(n);
    }
    // join
    if (a0 == nullptr) fail("str.join expects an iterable");
    std::string out;
    bool first = true;
    for (const Value& x : iterate(*a0)) {
      if (!first) out += s;
      out += str_arg(&x, "every joined item");
      first = false;
    }
    return Value::string(std::move(out));
  }

  Value dict_method(const Value& obj, const std::string& name, List& args, KwArgs& kw) {
    const Dict& d = *obj.dict;
    if (name == "get") {
      const Value* key = arg(args, kw, 0, "key");
      if (key == nullptr) fail("dict.get expects a key");
      const Value* dflt = arg(args, kw, 1, "default");
      const Value* hit = key->is_string() ? d.find(key->str_ref()) : nullptr;
      return hit != nullptr ? *hit : dflt != nullptr ? *dflt : Value::none();
    }
    List out;
    for (const auto& [k, v] : d.items) {
      if (name == "items") out.push_back(Value::make_list({d.key_value(k), v}, true));
      else if (name == "keys") out.push_back(d.key_value(k));
      else out.push_back(v);
    }
    return Value::make_list(std::move(out));
  }

  // ---- tests ----

  bool apply_test(const std::string& name, const Value& v, List& args) {
    using K = Value::Kind;
    const auto need = [&](size_t n) -> const Value& {
      if (args.size() < n) fail("test '" + name + "' expects an argument");
      return args[n - 1];
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.kind == K::kBool;
    if (name == "true") return v.kind == K::kBool && v.b;
    if (name == "false") return v.kind == K::kBool && !v.b;
    if (name == "integer") return v.kind == K::kInt;
    if (name == "float") return v.kind == K::kFloat;
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict() && !v.dict->is_namespace;
    if (name == "callable") return v.kind == K::kCallable;
    if (name == "escaped") return v.is_string() && v.markup;
    if (name == "filter" || name == "test") {  // `value in env.filters` (or tests)
      if ((v.is_list() && !v.is_tuple) || (v.is_dict() && !v.dict->is_namespace)) fail("unhashable type: '" + v.type_name() + "'");
      return v.is_string() && (name == "filter" ? is_known_filter(v.str_ref()) : is_known_test(v.str_ref()));
    }
    if (name == "iterable" || name == "sequence") {
      return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.dict->is_namespace);
    }
    if (name == "lower" || name == "upper") {
      if (!v.is_string()) return false;
      bool cased = false;
      for (uint32_t cp : utf8_decode(v.str_ref())) {
        if (!is_cased(cp)) continue;
        cased = true;
        if ((name == "lower") != (lower_cp(cp) == cp)) return false;
      }
      return cased;
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
      check_defined(v);
      const int64_t d = name == "divisibleby" ? int_arg(&need(1), 1, "divisibleby") : 2;
      if (!v.is_integral() || d == 0) fail("test '" + name + "' needs integers");
      const int64_t m = ((v.as_int() % d) + d) % d;
      return name == "odd" ? m == 1 : m == 0;
    }
    if (name == "sameas") {
      const Value& o = need(1);
      if (v.kind != o.kind) return false;
      if (v.is_list()) return v.list == o.list;
      if (v.is_dict()) return v.dict == o.dict;
      if (v.is_string()) return v.s == o.s;
      return equals(v, o);
    }
    if (name == "in") return in(v, need(1));
    if (name == "eq" || name == "equalto" || name == "==") return compare("==", v, need(1));
    if (name == "ne" || name == "!=") return compare("!=", v, need(1));
    if (name == "lt" || name == "lessthan" || name == "<") return compare("<", v, need(1));
    if (name == "le" || name == "<=") return compare("<=", v, need(1));
    if (name == "gt" || name == "greaterthan" || name == ">") return compare(">", v, need(1));
    if (name == "ge" || name == ">=") return compare(">=", v, need(1));
    fail("no test named '" + name + "'");
  }

  // ---- filters ----

  // select/reject/selectattr/rejectattr.
  Value select(const Value& seq, List& args, KwArgs& kw, bool by_attr, bool keep_if) {
    if (!truthy(seq)) return Value::make_list(List{});  // jinja2: `if value:` before anything
    size_t next = 0;
    std::string attr;
    if (by_attr) {
      if (args.empty() || !args[0].is_string()) fail("selectattr/rejectattr expects an attribute name");
      attr = args[0].str_ref();
      next = 1;
    }
    std::string test;
    if (next < args.size()) {
      if (!args[next].is_string()) fail("select: test name must be a string");
      test = args[next].str_ref();
      if (!is_known_test(test)) fail("no test named '" + test + "'");
      ++next;
    }
    List test_args(args.begin() + static_cast<std::ptrdiff_t>(std::min(next, args.size())), args.end());
    (void)kw;
    List out;
    for (const Value& item : iterate(seq)) {
      charge_steps(1);
      const Value x = by_attr ? attr_path(item, attr) : item;
      const bool pass = test.empty() ? truthy(x) : apply_test(test, x, test_args);
      if (pass == keep_if) out.push_back(item);
    }
    return Value::make_list(std::move(out));
  }

  // jinja2 make_attrgetter: the item at `attribute` — a dotted path whose all-digit parts
  // index as integers ("a.b.0"), or an integer; none: the item itself. Subscripting an
  // Undefined is an error; `dflt` (not none) replaces an Undefined after each part;
  // `lower`: a string comes back lower-cased (case-insensitive comparisons).
  Value attr_get(const Value& item, const Value* attribute, const Value* dflt, bool lower) {
    Value cur = item;
    if (attribute != nullptr && !attribute->is_none()) {
      List parts;
      if (attribute->is_string()) {
        const std::string& path = attribute->str_ref();
        for (size_t pos = 0;;) {
          const size_t dot = path.find('.', pos);
          const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
          const bool numeric = !part.empty() && part.size() < 18 &&
                               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
          parts.push_back(numeric ? Value::integer(std::stoll(part)) : Value::string(part));
          if (dot == std::string::npos) break;
          pos = dot + 1;
        }
      } else {
        parts.push_back(*attribute);
      }
      for (const Value& part : parts) {
        cur = get_item(cur, part);
        if (dflt != nullptr && !dflt->is_none() && cur.is_undefined()) cur = *dflt;
      }
    }
    if (lower && cur.is_string()) cur = Value::string(utf8_lower(cur.str_ref()));
    return cur;
  }

  // sort(reverse, case_sensitive, attribute) — attribute may list paths "a,b" — unique,
  // min, max (case_sensitive, attribute) and dictsort(case_sensitive, by, reverse).
  Value sort_filter(const std::string& name, const Value& v, List& args, KwArgs& kw) {
    const bool dictsort = name == "dictsort", sort = name == "sort";
    const Value* cs = arg(args, kw, dictsort ? 0 : sort ? 1 : 0, "case_sensitive");
    const bool lower = cs == nullptr || !truthy(*cs);
    const Value* rev = dictsort || sort ? arg(args, kw, dictsort ? 2 : 0, "reverse") : nullptr;
    const bool reverse = rev != nullptr && truthy(*rev);
    std::vector<std::pair<Value, Value>> keyed;  // (key, item)
    if (dictsort) {
      check_defined(v);
      if (!v.is_dict() || v.dict->is_namespace) fail("expected a mapping, got " + v.type_name());
      const Value* by = arg(args, kw, 1, "by");
      const std::string by_s = by != nullptr ? to_str(*by) : "key";
      if (by_s != "key" && by_s != "value") fail("You can only sort by either \"key\" or \"value\"");
      const Value pairs = dict_method(v, "items", args, kw);
      for (const Value& pair : *pairs.list) {
        Value k = (*pair.list)[by_s == "key" ? 0 : 1];
        if (lower && k.is_string()) k = Value::string(utf8_lower(k.str_ref()));
        keyed.emplace_back(std::move(k), pair);
      }
    } else {
      const Value* attr = arg(args, kw, sort ? 2 : 1, "attribute");
      for (const Value& x : iterate(v)) {
        charge_steps(1);
        if (!sort) {
          keyed.emplace_back(attr_get(x, attr, nullptr, lower), x);
          continue;
        }
        // make_multi_attrgetter: the key is the list of each comma-separated path's value
        List key;
        if (attr != nullptr && attr->is_string()) {
          for (const Value& path : py_split(attr->str_ref(), &kComma, -1)) key.push_back(attr_get(x, &path, nullptr, lower));
        } else {
          key.push_back(attr_get(x, attr, nullptr, lower));
        }
        keyed.emplace_back(Value::make_list(std::move(key)), x);
      }
    }
    if (name == "unique") {
      List out, seen;
      for (auto& [k, x] : keyed) {
        if ((k.is_list() && !k.is_tuple) || k.is_dict()) fail("unhashable type: '" + k.type_name() + "'");
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& y) { return equals(y, k); })) {
          seen.push_back(k);
          out.push_back(x);
        }
      }
      return Value::make_list(std::move(out));
    }
    if (name == "min" || name == "max") {  // the first of the smallest / largest
      if (keyed.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      size_t best = 0;
      for (size_t k = 1; k < keyed.size(); ++k) {
        if (name == "min" ? less_than(keyed[k].first, keyed[best].first) : less_than(keyed[best].first, keyed[k].first)) best = k;
      }
      return keyed[best].second;
    }
    // Python's sort is stable in both directions.
    std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
      return reverse ? less_than(b.first, a.first) : less_than(a.first, b.first);
    });
    List out;
    for (auto& kv : keyed) out.push_back(std::move(kv.second));
    return Value::make_list(std::move(out));
  }

  // groupby(attribute, default=None, case_sensitive=False): (grouper, list) tuples of the
  // items sorted by the attribute; case-insensitive grouping keeps the first item's case.
  Value groupby(const Value& v, List& args, KwArgs& kw) {
    const Value* attr = arg(args, kw, 0, "attribute");
    if (attr == nullptr) fail("missing required argument 'attribute'");
    const Value* dflt = arg(args, kw, 1, "default");
    const Value* cs = arg(args, kw, 2, "case_sensitive");
    const bool lower = cs == nullptr || !truthy(*cs);
    std::vector<std::pair<Value, Value>> keyed;
    for (const Value& x : iterate(v)) {
      charge_steps(1);
      keyed.emplace_back(attr_get(x, attr, dflt, lower), x);
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return less_than(a.first, b.first); });
    List out;
    for (size_t k = 0; k < keyed.size();) {
      size_t e = k + 1;
      while (e < keyed.size() && equals(keyed[e].first, keyed[k].first)) ++e;
      List members;
      for (size_t j = k; j < e; ++j) members.push_back(keyed[j].second);
      Value grouper = lower ? attr_get(members[0], attr, dflt, false) : keyed[k].first;
      Value group = Value::make_list({std::move(grouper), Value::make_list(std::move(members))}, true);
      group.is_group = true;
      out.push_back(std::move(group));
      k = e;
    }
    return Value::make_list(std::move(out));
  }

  // batch(linecount, fill_with=None) and slice(slices, fill_with=None), as lists.
  Value batch_or_slice(bool batch, const Value& v, List& args, KwArgs& kw) {
    const char* count_name = batch ? "linecount" : "slices";
    const Value* count_v = arg(args, kw, 0, count_name);
    if (count_v == nullptr) fail(std::string("missing required argument '") + count_name + "'");
    const Value* fill = arg(args, kw, 1, "fill_with");
    const bool filling = fill != nullptr && !fill->is_none();
    const List items = iterate(v);
    List out;
    if (batch) {
      // jinja2 compares the batch's length with linecount (==, then < to fill), so any
      // value is accepted until a comparison or the fill's repetition fails
      List tmp;
      for (const Value& x : items) {
        charge_steps(1);
        if (equals(Value::integer(static_cast<int64_t>(tmp.size())), *count_v)) {
          out.push_back(Value::make_list(std::exchange(tmp, {})));
        }
        tmp.push_back(x);
      }
      if (!tmp.empty()) {
        if (filling && less_than(Value::integer(static_cast<int64_t>(tmp.size())), *count_v)) {
          if (!count_v->is_integral()) fail("can't multiply sequence by non-int of type '" + count_v->type_name() + "'");
          if (count_v->as_int() - static_cast<int64_t>(tmp.size()) > limits_.max_loop_iterations) {
            fail("fill larger than the loop limit");
          }
          tmp.resize(static_cast<size_t>(count_v->as_int()), *fill);
        }
        out.push_back(Value::make_list(std::move(tmp)));
      }
      return Value::make_list(std::move(out));
    }
    if (!count_v->is_integral()) fail("'" + count_v->type_name() + "' object cannot be interpreted as an integer");
    const int64_t count = count_v->as_int();
    if (count == 0) fail("integer division or modulo by zero");
    const auto len = static_cast<int64_t>(items.size());
    int64_t per_slice = len / count, with_extra = len % count;  // Python's floor division
    if (with_extra != 0 && ((with_extra < 0) != (count < 0))) {
      --per_slice;
      with_extra += count;
    }
    int64_t offset = 0;
    for (int64_t k = 0; k < count; ++k) {
      count_iteration();
      const int64_t start = offset + k * per_slice;
      if (k < with_extra) ++offset;
      const int64_t end = offset + (k + 1) * per_slice;
      List tmp(items.begin() + std::min(start, len), items.begin() + std::clamp(end, std::min(start, len), len));
      if (filling && k >= with_extra) tmp.push_back(*fill);
      out.push_back(Value::make_list(std::move(tmp)));
    }
    return Value::make_list(std::move(out));
  }

  // truncate(length=255, killwords=False, end='...', leeway=5).
  Value truncate(const Value& v, List& args, KwArgs& kw) {
    const int64_t length = int_arg(arg(args, kw, 0, "length"), 255, "length");
    const Value* killwords = arg(args, kw, 1, "killwords");
    const Value* end_v = arg(args, kw, 2, "end");
    if (end_v != nullptr && !end_v->is_string()) fail("end must be a string, got " + end_v->type_name());
    const std::string end = end_v != nullptr ? end_v->str_ref() : "...";
    const int64_t leeway = int_arg(arg(args, kw, 3, "leeway"), 5, "leeway");
    const auto end_len = static_cast<int64_t>(utf8_length(end));
    if (length < end_len) fail("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
    if (leeway < 0) fail("expected leeway >= 0, got " + std::to_string(leeway));
    const auto fits = [&](int64_t n) { return n <= length || n - length <= leeway; };
    if (v.is_undefined()) return v;
    if (v.is_list() || (v.is_dict() && !v.dict->is_namespace)) {
      if (fits(static_cast<int64_t>(v.is_list() ? v.list->size() : v.dict->items.size()))) return v;
      fail("cannot truncate a " + v.type_name());
    }
    if (!v.is_string()) fail("object of type '" + v.type_name() + "' has no len()");
    const auto chars = utf8_chars(v.str_ref());
    if (fits(static_cast<int64_t>(chars.size()))) return v;
    std::string head;
    for (int64_t k = 0; k < length - end_len; ++k) head += chars[static_cast<size_t>(k)];
    if (killwords == nullptr || !truthy(*killwords)) {
      const size_t space = head.rfind(' ');  // rsplit(" ", 1)[0]
      if (space != std::string::npos) head.resize(space);
    }
    return Value::string(head + end);
  }

  // wordwrap(width=79, break_long_words=True, wrapstring='\n', break_on_hyphens=True):
  // each line of the text wrapped on its own.
  Value wordwrap(const Value& v, List& args, KwArgs& kw) {
    check_defined(v);
    if (!v.is_string()) fail("expected a string, got " + v.type_name());
    const int64_t width = int_arg(arg(args, kw, 0, "width"), 79, "width");
    const Value* long_words = arg(args, kw, 1, "break_long_words");
    const Value* wrap_v = arg(args, kw, 2, "wrapstring");
    const Value* hyphens = arg(args, kw, 3, "break_on_hyphens");
    if (wrap_v != nullptr && !wrap_v->is_none() && !wrap_v->is_string()) fail("wrapstring must be a string");
    const std::string wrap = wrap_v != nullptr && !wrap_v->is_none() ? wrap_v->str_ref() : "\n";
    std::string out;
    bool first = true;
    for (const std::string& line : py_splitlines(v.str_ref(), false)) {
      if (!first) out += wrap;
      first = false;
      const auto lines = text_wrap(line, width, long_words == nullptr || truthy(*long_words),
                                   hyphens == nullptr || truthy(*hyphens));
      for (size_t k = 0; k < lines.size(); ++k) out += (k ? wrap : "") + lines[k];
      if (out.size() > limits_.max_output_bytes) fail("result too large");
    }
    return Value::string(std::move(out));
  }

  // urlencode: a string (or any non-iterable) quoted as a URL path; a dict or a sequence
  // of pairs as a query string.
  Value urlencode(const Value& v) {
    const bool iterable = v.is_list() || (v.is_dict() && !v.dict->is_namespace) || v.is_undefined();
    if (!iterable) return Value::string(url_quote(to_str(v), false));
    std::string out;
    bool first = true;
    const auto add = [&](const Value& k, const Value& x) {
      if (!first) out += '&';
      first = false;
      out += url_quote(to_str(k), true) + "=" + url_quote(to_str(x), true);
    };
    if (v.is_dict()) {
      for (const auto& [k, x] : v.dict->items) add(Value::string(k), x);
    } else {
      for (const Value& item : iterate(v)) {
        const List pair = iterate(item);
        if (pair.size() != 2) fail("expected (key, value) pairs, got an item of " + std::to_string(pair.size()));
        add(pair[0], pair[1]);
      }
    }
    return Value::string(std::move(out));
  }

  Value apply_filter(const std::string& name, const Value& v, List& args, KwArgs& kw) {
    using K = Value::Kind;
    if (name == "default" || name == "d") {
      const Value* dflt = arg(args, kw, 0, "default_value");
      const Value* boolean = arg(args, kw, 1, "boolean");
      const bool use = v.is_undefined() || (boolean != nullptr && truthy(*boolean) && !truthy(v));
      return use ? (dflt != nullptr ? *dflt : Value::string("")) : v;
    }
    if (name == "tojson") {
      JsonOptions o;
      if (const Value* a = arg(args, kw, 0, "ensure_ascii")) o.ensure_ascii = truthy(*a);
      if (const Value* a = arg(args, kw, 1, "indent"); a != nullptr && !a->is_none()) {
        if (a->is_string()) {
          o.indent = 0;
          o.indent_str = a->str_ref();
        } else {
          o.indent = static_cast<int>(std::clamp<int64_t>(int_arg(a, 0, "tojson indent"), 0, 64));
          o.indent_str = std::string(static_cast<size_t>(o.indent), ' ');
        }
      }
      if (const Value* a = arg(args, kw, 2, "separators"); a != nullptr && !a->is_none()) {
        if (!a->is_list() || a->list->size() != 2 || !(*a->list)[0].is_string() || !(*a->list)[1].is_string()) {
          fail("tojson: separators must be a pair of strings");
        }
        o.item_sep = (*a->list)[0].str_ref();
        o.key_sep = (*a->list)[1].str_ref();
      }
      if (const Value* a = arg(args, kw, 3, "sort_keys")) o.sort_keys = truthy(*a);
      check_defined(v);
      return Value::string(to_json(v, o));
    }
    if (name == "length" || name == "count") {
      switch (v.kind) {
        case K::kUndefined: return Value::integer(0);
        case K::kString: return Value::integer(static_cast<int64_t>(utf8_length(v.str_ref())));
        case K::kList: return Value::integer(static_cast<int64_t>(v.list->size()));
        case K::kDict:
          if (!v.dict->is_namespace) return Value::integer(static_cast<int64_t>(v.dict->items.size()));
          break;
        default: break;
      }
      fail("object of type '" + v.type_name() + "' has no len()");
    }
    if (name == "items") {
      if (v.is_undefined()) return Value::make_list({});
      if (!v.is_dict() || v.dict->is_namespace) fail("items filter: can only get item pairs from a mapping");
      return dict_method(v, "items", args, kw);
    }
    if (name == "list") {
      if (v.is_list()) return Value::make_list(*v.list);
      return Value::make_list(iterate(v));
    }
    if (name == "first" || name == "last") {
      List items = iterate(v);
      if (items.empty()) return Value::undefined("no first/last item of an empty sequence");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "join") {
      const Value* sep = arg(args, kw, 0, "d");
      const Value* attr = arg(args, kw, 1, "attribute");
      const std::string d = sep != nullptr ? to_str(*sep) : "";
      std::string out;
      bool first = true;
      for (const Value& x : iterate(v)) {
        if (!first) out += d;
        out += to_str(attr != nullptr && !attr->is_none() ? attr_path(x, to_str(*attr)) : x);
        first = false;
        if (out.size() > limits_.max_output_bytes) fail("join result too large");
      }
      return Value::string(std::move(out));
    }
    if (name == "map") {
      const Value* attr = arg(args, kw, 99, "attribute");
      List out;
      // jinja2's do_map maps nothing over a false value (`if value:`): none | map(...) is empty.
      if (!truthy(v)) return Value::make_list(std::move(out));
      if (attr != nullptr) {
        const Value* dflt = arg(args, kw, 99, "default");
        for (const Value& x : iterate(v)) {
          Value y = attr_path(x, to_str(*attr));
          out.push_back(y.is_undefined() && dflt != nullptr ? *dflt : y);
        }
      } else {
        if (args.empty() || !args[0].is_string()) fail("map expects a filter name or attribute=");
        const std::string filter = args[0].str_ref();
        if (!is_known_filter(filter)) fail("no filter named '" + filter + "'");
        List rest(args.begin() + 1, args.end());
        check_filter_args(filter, rest, kw);
        for (const Value& x : iterate(v)) {
          List a = rest;
          KwArgs k = kw;
          out.push_back(apply_filter(filter, x, a, k));
        }
      }
      return Value::make_list(std::move(out));
    }
    if (name == "select" || name == "reject") return select(v, args, kw, false, name == "select");
    if (name == "selectattr" || name == "rejectattr") return select(v, args, kw, true, name == "selectattr");
    if (name == "attr") {
      const Value* attr_name = arg(args, kw, 0, "name");
      if (attr_name == nullptr || !attr_name->is_string()) fail("attr expects a name");
      // getattr only: a dict's keys are items, not attributes
      if (v.is_dict() && !v.dict->is_namespace && !contains(kDictMethods, attr_name->str_ref())) {
        return Value::undefined("'dict object' has no attribute '" + attr_name->str_ref() + "'");
      }
      return get_attr(v, attr_name->str_ref());
    }
    if (name == "int") {  // int(value, base), else int(float(value)), else the default
      const int64_t dflt = int_arg(arg(args, kw, 0, "default"), 0, "int default");
      const int64_t base = int_arg(arg(args, kw, 1, "base"), 10, "int base");
      if (v.is_integral()) return Value::integer(v.as_int());
      double f = 0;
      if (v.kind == K::kFloat) {
        f = v.f;
      } else if (v.is_string()) {
        int64_t x = 0;
        if (base >= 0 && base <= 36 && py_parse_int(v.str_ref(), static_cast<int>(base), &x)) return Value::integer(x);
        if (!py_parse_float(v.str_ref(), &f)) return Value::integer(dflt);
      } else {
        return Value::integer(dflt);
      }
      if (!std::isfinite(f) || std::fabs(f) > 9.2e18) return Value::integer(dflt);
      return Value::integer(static_cast<int64_t>(f));
    }
    if (name == "float") {
      const Value* dflt = arg(args, kw, 0, "default");
      if (v.is_number()) return Value::number(v.as_double());
      double f = 0;
      if (v.is_string() && py_parse_float(v.str_ref(), &f)) return Value::number(f);
      return dflt != nullptr ? *dflt : Value::number(0.0);
    }
    if (name == "abs") {
      check_defined(v);
      if (v.kind == K::kFloat) return Value::number(std::fabs(v.f));
      if (v.is_integral()) {
        if (v.as_int() == INT64_MIN) fail("integer overflow");
        return Value::integer(std::abs(v.as_int()));
      }
      fail("bad operand type for abs(): '" + v.type_name() + "'");
    }
    if (name == "round") {
      check_defined(v);
      if (!v.is_number()) fail("round: expected a number");
      const int64_t precision = int_arg(arg(args, kw, 0, "precision"), 0, "round precision");
      const Value* method_v = arg(args, kw, 1, "method");
      const std::string method = method_v != nullptr ? to_str(*method_v) : "common";
      if (method == "common" && v.is_integral()) return Value::integer(v.as_int());
      const double scale = std::pow(10.0, static_cast<double>(precision));
      const double x = v.as_double() * scale;
      const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
      return Value::number(r / scale);
    }
    if (name == "sum") {
      const Value* attr = arg(args, kw, 0, "attribute");
      Value total = arg(args, kw, 1, "start") != nullptr ? *arg(args, kw, 1, "start") : Value::integer(0);
      for (const Value& x : iterate(v)) total = binary("+", total, attr != nullptr && !attr->is_none() ? attr_path(x, to_str(*attr)) : x);
      return total;
    }
    if (name == "reverse") {
      if (v.is_string()) {
        auto chars = utf8_chars(v.str_ref());
        std::string out;
        for (size_t k = chars.size(); k-- > 0;) out += chars[k];
        return Value::string(std::move(out));
      }
      List items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::make_list(std::move(items));
    }
    if (name == "sort" || name == "unique" || name == "min" || name == "max" || name == "dictsort") {
      return sort_filter(name, v, args, kw);
    }
    if (name == "groupby") return groupby(v, args, kw);
    if (name == "batch" || name == "slice") return batch_or_slice(name == "batch", v, args, kw);
    if (name == "random") {
      // random.choice: only an empty or one-item sequence has a result that is not random
      if (v.is_list() || v.is_string() || v.is_undefined()) {
        List items = iterate(v);
        if (items.empty()) return Value::undefined("No random item, sequence was empty.");
        if (items.size() == 1) return items[0];
      }
      fail("picking a random item is not supported: a chat template must render the same prompt every time");
    }
    if (name == "safe") {  // Markup(value): a string keeps its untrusted ranges
      if (v.is_string()) {
        Value r = v;
        r.markup = true;
        return r;
      }
      return Value::markup_string(to_str(v));
    }
    if (name == "escape" || name == "e") return v.is_string() && v.markup ? v : Value::markup_string(html_escape(to_str(v)));
    if (name == "forceescape") return Value::markup_string(html_escape(to_str(v)));
    if (name == "string") return v.is_string() ? v : Value::string(to_str(v));
    if (name == "pprint") return Value::string(pformat(v));
    if (name == "truncate") return truncate(v, args, kw);
    if (name == "wordwrap") return wordwrap(v, args, kw);
    if (name == "urlencode") return urlencode(v);
    if (name == "xmlattr") {
      check_defined(v);
      if (!v.is_dict() || v.dict->is_namespace) fail("expected a mapping, got " + v.type_name());
      const Value* autospace = arg(args, kw, 0, "autospace");
      std::string out;
      for (const auto& [key, x] : v.dict->items) {
        if (x.is_none() || x.is_undefined()) continue;
        if (key.find_first_of(" \t\n\r\f\v/>=") != std::string::npos) {
          fail("Invalid character in attribute name: " + repr(Value::string(key)));
        }
        if (!out.empty()) out += ' ';
        out += html_escape(key) + "=\"" + (x.is_string() && x.markup ? x.str_ref() : html_escape(to_str(x))) + "\"";
      }
      if (!out.empty() && (autospace == nullptr || truthy(*autospace))) out.insert(0, " ");
      return Value::string(std::move(out));
    }
    if (name == "filesizeformat") {
      check_defined(v);
      double x = 0;
      if (v.is_number()) {
        x = v.as_double();
      } else if (v.is_string()) {
        if (!py_parse_float(v.str_ref(), &x)) fail("could not convert string to float: " + repr(v));
      } else {
        fail("float() argument must be a string or a real number, not '" + v.type_name() + "'");
      }
      const Value* binary = arg(args, kw, 0, "binary");
      return Value::string(filesize_format(x, binary != nullptr && truthy(*binary)));
    }
    // String filters: all work on str(value).
    const std::string s = to_str(v);
    if (name == "trim") {
      const Value* chars = arg(args, kw, 0, "chars");
      const std::string cs = chars == nullptr || chars->is_none() ? std::string() : to_str(*chars);
      if (v.is_string()) return strip_value(v, chars == nullptr || chars->is_none() ? nullptr : &cs, true, true);
      if (chars == nullptr || chars->is_none()) return Value::string(py_strip(s, true, true));
      return Value::string(py_strip_chars(s, cs, true, true));
    }
    if (name == "upper") return string_like(v, utf8_upper(s));
    if (name == "lower") return string_like(v, utf8_lower(s));
    if (name == "capitalize") return string_like(v, capitalize(s));
    if (name == "title") return Value::string(jinja_title(s));
    if (name == "wordcount") {  // runs of \w
      int64_t n = 0;
      bool in_word = false;
      for (uint32_t cp : utf8_decode(s)) {
        const bool w = py_is_word_char(cp);
        n += w && !in_word ? 1 : 0;
        in_word = w;
      }
      return Value::integer(n);
    }
    if (name == "striptags") return Value::string(strip_tags(s));
    if (name == "center") {
      const Value* width = arg(args, kw, 0, "width");
      if (width != nullptr && !width->is_integral()) fail("'" + width->type_name() + "' object cannot be interpreted as an integer");
      return string_like(v, py_center(s, width != nullptr ? width->as_int() : 80));
    }
    if (name == "format") {
      if (!args.empty() && !kw.empty()) fail("can't handle positional and keyword arguments at the same time");
      Value values;
      if (!kw.empty()) {
        Dict d;
        for (auto& [k, x] : kw) d.set(k, x);
        values = Value::make_dict(std::move(d));
      } else {
        values = Value::make_list(args, true);
      }
      return string_like(v, percent_format(s, values, v.is_string() && v.markup));
    }
    if (name == "replace") {
      const Value* from = arg(args, kw, 0, "old");
      const Value* to = arg(args, kw, 1, "new");
      if (from == nullptr || to == nullptr) fail("replace expects old and new");
      return Value::string(py_replace(s, to_str(*from), to_str(*to), int_arg(arg(args, kw, 2, "count"), -1, "replace count")));
    }
    if (name == "indent") {
      const Value* width = arg(args, kw, 0, "width");
      const std::string pad = width != nullptr && width->is_string() ? width->str_ref()
                                                                      : std::string(static_cast<size_t>(std::clamp<int64_t>(int_arg(width, 4, "indent width"), 0, 256)), ' ');
      const Value* first_v = arg(args, kw, 1, "first");
      const Value* blank_v = arg(args, kw, 2, "blank");
      const bool first = first_v != nullptr && truthy(*first_v), blank = blank_v != nullptr && truthy(*blank_v);
      std::vector<std::string> lines;
      size_t pos = 0;
      const std::string t = s + "\n";
      while (pos < t.size()) {
        const size_t nl = t.find('\n', pos);
        lines.push_back(t.substr(pos, nl - pos));
        pos = nl + 1;
      }
      std::string out = lines.empty() ? "" : lines[0];
      for (size_t k = 1; k < lines.size(); ++k) out += "\n" + ((blank || !lines[k].empty()) ? pad : "") + lines[k];
      return Value::string(first ? pad + out : out);
    }
    fail("no filter named '" + name + "'");
  }

  const RenderLimits& limits_;
  Budget budget_;
  std::vector<Frame> frames_;
  size_t floor_ = 0;  // frames below this (except the root) are hidden: a macro call
  std::string* out_ = nullptr;
  Spans* out_spans_ = nullptr;  // untrusted ranges of *out_, or null (not tracked)
  int64_t iterations_ = 0;
  int depth_ = 0;
};

std::string render(const Template& tpl, const Value& context, const RenderLimits& limits, Spans* untrusted) {
  Interpreter in(limits);
  return in.run(tpl, context, untrusted);
}

}  // namespace specula::jinja
