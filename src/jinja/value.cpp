// jinja/value.cpp — Value construction, Python conversions, comparisons and
// the transformers-style JSON serialiser. See jinja/value.h.
#include "jinja/value.h"

#include "core/utf8.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include <utf8proc.h>

namespace specula::jinja {

namespace {
thread_local Budget* t_budget = nullptr;
}  // namespace

void set_thread_budget(Budget* budget) { t_budget = budget; }
void charge_steps(int64_t n) {
  if (t_budget != nullptr && (t_budget->steps -= n) < 0) {
    throw JinjaError("evaluation step limit exceeded");
  }
}
void charge_bytes(int64_t n) {
  if (t_budget != nullptr && (t_budget->bytes -= n) < 0) {
    throw JinjaError("string memory limit exceeded");
  }
}

namespace {
void adopt_child(Value& parent, const Value& child) {
  parent.depth = std::max(parent.depth, child.depth + 1);
  parent.has_namespace = parent.has_namespace || child.has_namespace;
  parent.untrusted = parent.untrusted || child.untrusted;
  if (parent.depth > kMaxValueDepth) {
    throw JinjaError("value nested deeper than " + std::to_string(kMaxValueDepth));
  }
}
}  // namespace

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value Dict::key_value(const std::string& key) const {
  return keys_untrusted ? Value::untrusted_string(key) : Value::string(key);
}

void Dict::set(std::string key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(v));
}

Value Value::undefined(std::string name) {
  Value v;
  if (!name.empty()) v.s = std::make_shared<const std::string>(std::move(name));
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::kBool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::kInt;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::kString;
  charge_bytes(static_cast<int64_t>(x.size()));
  v.s = std::make_shared<const std::string>(std::move(x));
  return v;
}
Value Value::untrusted_string(std::string x) {
  const size_t n = x.size();
  Value v = string(std::move(x));
  v.untrusted = n > 0;
  v.spans = std::make_shared<const Spans>(n > 0 ? Spans{{0, n}} : Spans{});
  return v;
}
Value Value::string_with_spans(std::string x, Spans spans) {
  Value v = string(std::move(x));
  v.untrusted = !spans.empty();
  v.spans = std::make_shared<const Spans>(std::move(spans));
  return v;
}

bool holds_untrusted(const Value& v) {
  if (v.untrusted) return true;
  if (v.kind == Value::Kind::kDict && v.has_namespace) {
    for (const auto& kv : v.dict->items)
      if (holds_untrusted(kv.second)) return true;
  }
  if (v.kind == Value::Kind::kList && v.has_namespace) {
    for (const Value& c : *v.list)
      if (holds_untrusted(c)) return true;
  }
  return false;
}

void append_spans(Spans& out, const Value& v, size_t text_size, size_t offset) {
  if (v.kind == Value::Kind::kString && v.spans) {
    for (const auto& [b, e] : *v.spans) {
      if (!out.empty() && out.back().second == b + offset) {
        out.back().second = e + offset;  // adjacent: merge
      } else {
        out.emplace_back(b + offset, e + offset);
      }
    }
    return;
  }
  if (text_size > 0 && holds_untrusted(v)) {
    if (!out.empty() && out.back().second == offset) {
      out.back().second = offset + text_size;
    } else {
      out.emplace_back(offset, offset + text_size);
    }
  }
}

Value taint_fresh(Value v) {
  if (v.kind == Value::Kind::kString) {
    if (v.spans) return v;
    const size_t n = v.s->size();
    v.untrusted = n > 0;
    v.spans = std::make_shared<const Spans>(n > 0 ? Spans{{0, n}} : Spans{});
    return v;
  }
  if (v.kind == Value::Kind::kList) {
    // Copied only when some element changes (the common case, a list of dicts or of
    // strings that keep their ranges, returns as it is).
    std::optional<List> out;
    for (size_t k = 0; k < v.list->size(); ++k) {
      const Value& c = (*v.list)[k];
      if (!((c.kind == Value::Kind::kString && !c.spans) || c.kind == Value::Kind::kList)) continue;
      Value t = taint_fresh(c);
      if (t.spans == c.spans && t.list == c.list) continue;
      if (!out) out = *v.list;
      (*out)[k] = std::move(t);
    }
    return out ? Value::make_list(std::move(*out), v.is_tuple) : v;
  }
  return v;
}

Value Value::make_list(List x, bool is_tuple) {
  Value v;
  v.kind = Kind::kList;
  v.is_tuple = is_tuple;
  v.depth = 1;
  for (const Value& c : x) adopt_child(v, c);
  charge_steps(static_cast<int64_t>(x.size()));
  v.list = std::make_shared<const List>(std::move(x));
  return v;
}
Value Value::markup_string(std::string x) {
  Value v = string(std::move(x));
  v.markup = true;
  return v;
}
Value Value::make_dict(Dict x) {
  Value v;
  v.kind = Kind::kDict;
  v.depth = 1;
  v.has_namespace = x.is_namespace;
  v.untrusted = x.keys_untrusted && !x.items.empty();
  for (const auto& kv : x.items) adopt_child(v, kv.second);
  charge_steps(static_cast<int64_t>(x.items.size()));
  v.dict = std::make_shared<Dict>(std::move(x));
  return v;
}
Value Value::callable(std::string name, std::function<Value(Interpreter&, List&, KwArgs&)> f) {
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::make_shared<const Callable>(Callable{std::move(name), std::move(f)});
  return v;
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return dict->is_namespace ? "Namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.b;
    case Value::Kind::kInt: return v.i != 0;
    case Value::Kind::kFloat: return v.f != 0;
    case Value::Kind::kString: return !v.s->empty();
    case Value::Kind::kList: return !v.list->empty();
    case Value::Kind::kDict: return v.dict->is_namespace || !v.dict->items.empty();
    case Value::Kind::kCallable: return true;
  }
  return false;
}

// ---- UTF-8 and Python whitespace ----

namespace {

// Decodes the code point at s[pos]; an invalid or truncated sequence is one byte.
uint32_t decode_at(std::string_view s, size_t pos, size_t* len) {
  const auto c = static_cast<unsigned char>(s[pos]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || pos + n > s.size()) {
    *len = 1;
    return c;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[pos + k]);
    if ((cc >> 6) != 0x2) {
      *len = 1;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  *len = n;
  return cp;
}

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len, ++n) decode_at(s, pos, &len);
  return n;
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    decode_at(s, pos, &len);
    out.push_back(s.substr(pos, len));
  }
  return out;
}

size_t py_space_len(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  size_t len = 0;
  return is_py_space(decode_at(s, pos, &len)) ? len : 0;
}

size_t py_space_len_before(std::string_view s, size_t end) {
  if (end == 0) return 0;
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) >> 6) == 0x2) --start;
  size_t len = 0;
  const uint32_t cp = decode_at(s, start, &len);
  if (start + len != end) return 0;
  return is_py_space(cp) ? len : 0;
}

std::string py_strip(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    for (size_t n; (n = py_space_len(s, b)) > 0;) b += n;
  }
  if (right) {
    for (size_t n; e > b && (n = py_space_len_before(s, e)) > 0;) e -= n;
  }
  return std::string(s.substr(b, e - b));
}

std::string py_strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  const auto set = utf8_chars(chars);
  const auto in_set = [&](std::string_view c) { return std::find(set.begin(), set.end(), c) != set.end(); };
  auto cs = utf8_chars(s);
  size_t b = 0, e = cs.size();
  if (left) {
    while (b < e && in_set(cs[b])) ++b;
  }
  if (right) {
    while (e > b && in_set(cs[e - 1])) --e;
  }
  std::string out;
  for (size_t k = b; k < e; ++k) out += cs[k];
  return out;
}

bool py_is_word_char(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  if (cp > 0x10FFFF) return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return true;
    default: return false;
  }
}

bool py_is_decimal(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return cp <= 0x10FFFF && utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_ND;
}

bool py_is_printable(uint32_t cp) {
  if (cp < 0x80) return cp >= 0x20 && cp < 0x7F;
  if (cp > 0x10FFFF) return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = decode_at(s, pos, &len);
    const bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
                     cp == 0x2028 || cp == 0x2029;
    if (!brk) continue;
    size_t end = pos + len;
    if (cp == '\r' && end < s.size() && s[end] == '\n') ++end;
    out.emplace_back(s.substr(start, (keepends ? end : pos) - start));
    len = end - pos;
    start = end;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

bool py_parse_float(std::string_view s, double* out) {
  std::string t = py_strip(s, true, true);
  std::string clean;
  size_t k = 0;
  if (k < t.size() && (t[k] == '+' || t[k] == '-')) clean += t[k++];
  std::string rest = t.substr(k);
  std::string lower;
  for (char c : rest) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  if (lower == "inf" || lower == "infinity" || lower == "nan") {
    const double x = lower == "nan" ? std::nan("") : HUGE_VAL;
    *out = clean == "-" ? -x : x;
    return true;
  }
  // digits [. digits] [e [sign] digits], underscores only between two digits
  bool any_digit = false, seen_dot = false, seen_exp = false, exp_digit = false;
  for (size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    const auto digit = [&](size_t j) { return j < rest.size() && rest[j] >= '0' && rest[j] <= '9'; };
    if (c >= '0' && c <= '9') {
      (seen_exp ? exp_digit : any_digit) = true;
      clean += c;
    } else if (c == '_') {
      if (i == 0 || !digit(i - 1) || !digit(i + 1)) return false;
    } else if (c == '.' && !seen_dot && !seen_exp) {
      seen_dot = true;
      clean += c;
    } else if ((c == 'e' || c == 'E') && !seen_exp && any_digit) {
      seen_exp = true;
      clean += 'e';
      if (i + 1 < rest.size() && (rest[i + 1] == '+' || rest[i + 1] == '-')) clean += rest[++i];
    } else {
      return false;
    }
  }
  if (!any_digit || (seen_exp && !exp_digit)) return false;
  char* end = nullptr;
  *out = std::strtod(clean.c_str(), &end);
  return end == clean.c_str() + clean.size();
}

bool py_parse_int(std::string_view s, int base, int64_t* out) {
  if (base != 0 && (base < 2 || base > 36)) return false;
  const std::string t = py_strip(s, true, true);
  size_t k = 0;
  bool neg = false;
  if (k < t.size() && (t[k] == '+' || t[k] == '-')) neg = t[k++] == '-';
  const auto lower = [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); };
  bool prefixed = false;
  if (k + 1 < t.size() && t[k] == '0') {
    const char p = lower(t[k + 1]);
    const int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (pb != 0 && (base == 0 || base == pb)) {
      base = pb;
      k += 2;
      prefixed = true;
    }
  }
  const bool literal_rules = base == 0;  // base 0 reads a Python literal: no leading zeros
  if (base == 0) base = 10;
  uint64_t v = 0;
  bool any = false, prev_digit = prefixed, all_zero = true;  // "0x_1f" is allowed
  const size_t first = k;
  for (; k < t.size(); ++k) {
    const char c = lower(t[k]);
    if (c == '_') {
      if (!prev_digit || k + 1 >= t.size()) return false;
      prev_digit = false;
      continue;
    }
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
    if (d >= base) return false;
    if (v > (uint64_t{1} << 63) / static_cast<uint64_t>(base)) return false;
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    if (v > (uint64_t{1} << 63)) return false;
    any = prev_digit = true;
    all_zero = all_zero && d == 0;
  }
  if (!any || !prev_digit) return false;
  if (literal_rules && !prefixed && t[first] == '0' && !all_zero) return false;
  if (!neg && v == (uint64_t{1} << 63)) return false;
  *out = neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

uint32_t upper_cp(uint32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
  if (cp == 0xB5) return 0x39C;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x131) return 'I';
    if (cp == 0x17F) return 'S';
    if (cp == 0x130 || cp == 0x138 || cp == 0x149 || cp == 0x178) return cp;
    const bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    return (cp % 2 == 0) == odd_upper ? cp - 1 : cp;
  }
  if (cp >= 0x3B1 && cp <= 0x3C9) return cp == 0x3C2 ? 0x3A3 : cp - 32;
  if (cp == 0x3AC) return 0x386;
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 37;
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD || cp == 0x3CE) return cp - 63;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

uint32_t lower_cp(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x130 || cp == 0x131 || cp == 0x138 || cp == 0x149 || cp == 0x17F) return cp;
    const bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    return (cp % 2 == 0) != odd_upper ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 63;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) out.push_back(decode_at(s, pos, &len));
  return out;
}

void utf8_append(uint32_t cp, std::string& out) { specula::utf8_append(cp, out); }

namespace {
// Re-encodes s with cp mapped; bytes of invalid sequences are copied unchanged.
template <typename F>
std::string map_cps(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = decode_at(s, pos, &len);
    if (len == 1 && cp >= 0x80) {
      out += s[pos];
    } else {
      f(cp, out);
    }
  }
  return out;
}
}  // namespace

std::string utf8_upper(std::string_view s) {
  return map_cps(s, [](uint32_t cp, std::string& out) {
    if (cp == 0xDF) {
      out += "SS";
    } else {
      utf8_append(upper_cp(cp), out);
    }
  });
}

std::string utf8_lower(std::string_view s) {
  return map_cps(s, [](uint32_t cp, std::string& out) { utf8_append(lower_cp(cp), out); });
}

// ---- str() / repr() ----

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-d.ddde+XX"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t epos = sci.find('e');
  const int exp10 = std::stoi(sci.substr(epos + 1));
  std::string digits = sci.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp10 >= -4 && exp10 < 16) {
    std::string out;
    if (exp10 < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
    } else if (static_cast<size_t>(exp10) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp10) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp10) + 1) + "." + digits.substr(static_cast<size_t>(exp10) + 1);
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return sign + mant + ebuf;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = decode_at(s, pos, &len);
    char buf[16];
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == static_cast<uint32_t>(quote)) {
      out += '\\';
      out += quote;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!py_is_printable(cp)) {
      std::snprintf(buf, sizeof(buf), cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
      out += buf;
    } else {
      out.append(s, pos, len);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.b ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.i);
    case Value::Kind::kFloat: return float_repr(v.f);
    case Value::Kind::kString: return *v.s;
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  charge_steps(1);
  switch (v.kind) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kString: return v.markup ? "Markup(" + repr_string(*v.s) + ")" : repr_string(*v.s);
    case Value::Kind::kList: {
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
      charge_bytes(static_cast<int64_t>(out.size()));
      if (v.is_tuple) return out + (v.list->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Kind::kDict: {
      std::string out = v.dict->is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        out += (first ? "" : ", ") + repr_string(k) + ": " + repr(x);
        first = false;
      }
      charge_bytes(static_cast<int64_t>(out.size()));
      return out + (v.dict->is_namespace ? "}>" : "}");
    }
    case Value::Kind::kCallable: return "<function " + v.fn->name + ">";
    default: return to_str(v);
  }
}

std::string ascii_repr(const Value& v) {
  const std::string r = repr(v);
  std::string out;
  for (size_t pos = 0, len = 0; pos < r.size(); pos += len) {
    const uint32_t cp = decode_at(r, pos, &len);
    if (cp < 0x80) {
      out += static_cast<char>(cp);
      continue;
    }
    char buf[16];
    std::snprintf(buf, sizeof(buf), cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
    out += buf;
  }
  return out;
}

// ---- comparisons ----

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  charge_steps(1);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return *a.s == *b.s;
    case K::kList: {
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!equals((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    }
    case K::kDict: {
      if (a.dict->is_namespace || b.dict->is_namespace) return a.dict == b.dict;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (y == nullptr || !equals(x, *y)) return false;
      }
      return true;
    }
    case K::kCallable: return a.fn == b.fn;
    default: return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return *a.s < *b.s;
  if (a.is_list() && b.is_list()) {
    const List& x = *a.list;
    const List& y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!equals(x[k], y[k])) return less_than(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  throw JinjaError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

// ---- JSON (Python json.dumps) ----

namespace {

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  char buf[16];
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = decode_at(s, pos, &len);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      out += buf;
    } else {
      out.append(s, pos, len);
    }
  }
  out += '"';
}

void json_value(const Value& v, const JsonOptions& o, int level, std::string& out) {
  using K = Value::Kind;
  charge_steps(1);
  if (v.is_string()) charge_bytes(static_cast<int64_t>(v.s->size()));
  const bool pretty = o.indent >= 0;
  const auto newline = [&](int lvl) {
    out += '\n';
    for (int k = 0; k < lvl; ++k) out += o.indent_str;
  };
  switch (v.kind) {
    case K::kNone: out += "null"; return;
    case K::kBool: out += v.b ? "true" : "false"; return;
    case K::kInt: out += std::to_string(v.i); return;
    case K::kFloat:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
      else out += float_repr(v.f);
      return;
    case K::kString: json_string(*v.s, o.ensure_ascii, out); return;
    case K::kList: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      if (pretty) newline(level + 1);
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k > 0) {
          out += o.item_sep;
          if (pretty) newline(level + 1);
        }
        json_value((*v.list)[k], o, level + 1, out);
      }
      if (pretty) newline(level);
      out += ']';
      return;
    }
    case K::kDict: {
      if (v.dict->is_namespace) break;
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
      }
      out += '{';
      if (pretty) newline(level + 1);
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) {
          out += o.item_sep;
          if (pretty) newline(level + 1);
        }
        json_string(items[k]->first, o.ensure_ascii, out);
        out += o.key_sep;
        json_value(items[k]->second, o, level + 1, out);
      }
      if (pretty) newline(level);
      out += '}';
      return;
    }
    default: break;
  }
  throw JinjaError("tojson: Object of type " + v.type_name() + " is not JSON serializable");
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  JsonOptions o = options;
  if (o.item_sep.empty()) o.item_sep = o.indent >= 0 ? "," : ", ";
  std::string out;
  json_value(v, o, 0, out);
  return out;
}

}  // namespace specula::jinja
