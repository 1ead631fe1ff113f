// jinja/value.h — the value type of the chat-template interpreter, with
// Python's semantics for what chat templates observe.
//
// Owns: Value (undefined, none, bool, int, float, string, list, dict, callable), its
// Python-compatible conversions (str(), repr(), truthiness, ==, <), the JSON
// serialisation transformers uses for `tojson` (json.dumps(ensure_ascii=False, ...)),
// and the UTF-8 / Python character-class, whitespace and number-parsing helpers string
// methods and filters need.
// Semantics follow CPython 3 and Jinja2 3.x (jinja2/runtime.py Undefined: renders "",
// is falsy, iterates empty, equals only another Undefined).
// Does not parse or evaluate templates (jinja/parser.cpp, jinja/eval.cpp). Dict keys
// are strings only; tuples are immutable lists flagged to print as tuples.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specula::jinja {

// Every parse or render failure inside the interpreter; caught at the ChatTemplate API
// boundary and turned into a Status.
class JinjaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Value;
class Interpreter;
// Byte ranges [begin, end) of a string that came from untrusted input (chat message
// content, tool definitions): sorted, disjoint. The ranges follow the text through the
// operations that copy it unchanged (concatenation with ~ and +, output, strip/trim,
// captured blocks and macros); any other string an operation makes from an input that
// holds untrusted text is untrusted whole. The renderer returns the output's ranges so
// that no special token can be parsed out of untrusted text (chat_template.h).
using Spans = std::vector<std::pair<size_t, size_t>>;
using List = std::vector<Value>;
using KwArgs = std::vector<std::pair<std::string, Value>>;

// Values nested deeper than this are rejected when built, so every recursive walk
// (repr, tojson, ==, destruction) has bounded stack use.
inline constexpr uint32_t kMaxValueDepth = 128;

// Work budget of the render running on this thread: recursive value walks charge it so
// that a small template cannot make repr/tojson/== of a shared structure run for ever.
struct Budget {
  int64_t steps = 0;   // evaluation steps left
  int64_t bytes = 0;   // bytes of new strings left
};
void set_thread_budget(Budget* budget);  // nullptr: unlimited
void charge_steps(int64_t n);            // JinjaError when exhausted
void charge_bytes(int64_t n);

// Insertion-ordered string-keyed map (Python dict order). Lookups are linear: template
// dicts are small.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // created by namespace(): the only mutable object
  bool keys_untrusted = false;  // its keys came from untrusted input (client JSON): keys read
                                // as strings (iteration, items(), dictsort) are untrusted
  const Value* find(std::string_view key) const;
  // A key as a string value (untrusted when keys_untrusted).
  Value key_value(const std::string& key) const;
  void set(std::string key, Value v);
};

struct Callable {
  std::string name;
  std::function<Value(Interpreter&, List& args, KwArgs& kwargs)> fn;
};

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;   // kString (immutable, shared); kUndefined: error message or null
  std::shared_ptr<const List> list;       // kList (immutable, shared)
  std::shared_ptr<Dict> dict;             // kDict (mutable only when is_namespace)
  std::shared_ptr<const Callable> fn;     // kCallable
  uint32_t depth = 0;                     // nesting depth of lists/dicts (scalars 0)
  bool has_namespace = false;             // is or contains a namespace (no cycles allowed)
  bool is_tuple = false;                  // kList made by a tuple literal or items(): prints as (a, b)
  bool is_group = false;                  // kList: a groupby (grouper, list) tuple; .grouper and .list read it
  bool markup = false;                    // kString: a markupsafe.Markup (made by safe/escape): escape leaves it
                                          // alone, + and % escape the other operands, repr is Markup('...')
  bool untrusted = false;                 // is or holds untrusted text (see Spans)
  // kString: where its untrusted bytes are; null when the operation that made it does not
  // track ranges (then the string is untrusted whole if an input was, see taint_fresh).
  std::shared_ptr<const Spans> spans;

  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  // A string whose bytes are all untrusted.
  static Value untrusted_string(std::string v);
  // A string with known untrusted ranges (maybe none).
  static Value string_with_spans(std::string v, Spans spans);
  static Value make_list(List v, bool is_tuple = false);
  // A Markup string (see `markup`).
  static Value markup_string(std::string v);
  static Value make_dict(Dict v);
  static Value callable(std::string name, std::function<Value(Interpreter&, List&, KwArgs&)> fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_integral() const { return kind == Kind::kInt || kind == Kind::kBool; }
  const std::string& str_ref() const { return *s; }
  int64_t as_int() const { return kind == Kind::kBool ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::kFloat ? f : static_cast<double>(as_int()); }
  // Python type name for error messages ("str", "int", "list", "dict", "NoneType", ...).
  std::string type_name() const;
};

// Whether v is or holds untrusted text (namespaces are looked into: they change).
bool holds_untrusted(const Value& v);
// Appends v's untrusted ranges (a string's spans; all of `text_size` bytes when v is not
// a string with spans but holds untrusted text) shifted by `offset`.
void append_spans(Spans& out, const Value& v, size_t text_size, size_t offset);
// The result of an operation whose inputs held untrusted text: a string that does not
// track ranges (spans null) becomes untrusted whole; so does each such string directly
// in a list, at any depth of nested lists. Other values are returned as they are (their
// elements keep their own).
Value taint_fresh(Value v);

bool truthy(const Value& v);
// Python str(v); Undefined is "".
std::string to_str(const Value& v);
// Python repr(v) (strings quoted the way CPython quotes them).
std::string repr(const Value& v);
// Python float.__repr__ (shortest round-trip digits, "1.0", "1e+16", "1.5e-05").
std::string float_repr(double d);
// Python ==. Numbers compare by value across int/float/bool; Undefined == Undefined.
bool equals(const Value& a, const Value& b);
// Python <: numbers, strings (code point order), lists lexicographic; else JinjaError.
bool less_than(const Value& a, const Value& b);

struct JsonOptions {
  int indent = -1;             // < 0: single line
  std::string indent_str;      // used when indent >= 0 (indent as spaces, or a string)
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_sep;        // default ", " (single line) or "," (indented)
  std::string key_sep = ": ";
};
// json.dumps(v, **options) as transformers' tojson filter calls it. Undefined and
// callables are not serialisable (JinjaError).
std::string to_json(const Value& v, const JsonOptions& options);

// UTF-8 helpers. Strings are assumed valid UTF-8 (JSON input is); an invalid byte is
// treated as one code point.
size_t utf8_length(std::string_view s);
std::vector<std::string_view> utf8_chars(std::string_view s);
// Length in bytes of the Python whitespace character (str.isspace) at s[pos], or 0.
size_t py_space_len(std::string_view s, size_t pos);
// Bytes of Python whitespace ending at s[end] (the character just before `end`), or 0.
size_t py_space_len_before(std::string_view s, size_t end);
std::string py_strip(std::string_view s, bool left, bool right);
// Python str.upper()/lower() for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic
// (plus ß -> SS); other scripts pass through unchanged. No final-sigma rule.
uint32_t upper_cp(uint32_t cp);
uint32_t lower_cp(uint32_t cp);
std::string utf8_upper(std::string_view s);
std::string utf8_lower(std::string_view s);
// Code points of a string (invalid bytes as themselves) and back.
std::vector<uint32_t> utf8_decode(std::string_view s);
void utf8_append(uint32_t cp, std::string& out);
std::string py_strip_chars(std::string_view s, std::string_view chars, bool left, bool right);
// Python's classes of one code point: \w of a str regex (str.isalnum() or '_'), \d
// (decimal digit, category Nd), str.isprintable().
bool py_is_word_char(uint32_t cp);
bool py_is_decimal(uint32_t cp);
bool py_is_printable(uint32_t cp);
// Python str.splitlines(keepends) (\n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029).
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// Python float(str): surrounding whitespace, sign, digits with single underscores between
// them, '.', exponent, inf/infinity/nan in any case. False when Python raises ValueError.
bool py_parse_float(std::string_view s, double* out);
// Python int(str, base) for base 0 or 2..36 (prefix 0x/0o/0b, single underscores between
// digits); false when Python raises ValueError or the value does not fit in int64.
bool py_parse_int(std::string_view s, int base, int64_t* out);
// Python ascii(v): repr(v) with every non-ASCII character as \xhh, \uhhhh or \Uhhhhhhhh.
std::string ascii_repr(const Value& v);

}  // namespace specula::jinja
