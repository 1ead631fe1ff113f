// jinja/pytext.cpp — printf-style formatting, textwrap, pprint, html escaping and
// unescaping, URL quoting and filesizeformat for the Jinja filters. See jinja/pytext.h.
#include "jinja/pytext.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace specula::jinja {
namespace {

[[noreturn]] void fail(const std::string& what) { throw JinjaError(what); }

int64_t cp_len(std::string_view s) { return static_cast<int64_t>(utf8_length(s)); }

// n copies of c, charged to the string budget first (widths come from templates).
std::string fill(int64_t n, char c) {
  if (n <= 0) return {};
  charge_bytes(n);
  return std::string(static_cast<size_t>(n), c);
}

// The first n code points of s.
std::string cp_prefix(std::string_view s, int64_t n) {
  const auto chars = utf8_chars(s);
  if (n >= static_cast<int64_t>(chars.size())) return std::string(s);
  std::string out;
  for (int64_t k = 0; k < n; ++k) out += chars[static_cast<size_t>(k)];
  return out;
}

std::string encode(const std::vector<uint32_t>& cps, size_t b, size_t e) {
  std::string out;
  for (size_t k = b; k < e; ++k) utf8_append(cps[k], out);
  return out;
}

// ---- printf-style formatting ----

struct Spec {
  bool ljust = false, sign = false, blank = false, alt = false, zero = false;
  int64_t width = -1, prec = -1;
};

// Which argument each conversion takes: CPython's state (a tuple's next item, or the one
// argument once; %(key) makes the looked-up value the one argument).
class FormatArgs {
 public:
  explicit FormatArgs(const Value& args) : current_(args) {
    if (args.is_list() && args.is_tuple) {
      tuple_ = args.list.get();
      arglen_ = static_cast<int64_t>(tuple_->size());
      argidx_ = 0;
    }
    // what CPython takes for a mapping: anything with __getitem__ but a tuple or a str
    // (so a list, and jinja2's Undefined, too)
    if ((args.is_dict() && !args.dict->is_namespace) || (args.is_list() && !args.is_tuple) || args.is_undefined()) {
      mapping_ = &args;
    }
  }
  Value next() {
    if (argidx_ < arglen_) {
      ++argidx_;
      return arglen_ < 0 ? current_ : (*tuple_)[static_cast<size_t>(argidx_ - 1)];
    }
    fail("not enough arguments for format string");
  }
  void select_key(const std::string& key) {
    if (mapping_ == nullptr) fail("format requires a mapping");
    if (mapping_->is_undefined()) fail(mapping_->s ? *mapping_->s : "value is undefined");
    if (mapping_->is_list()) fail("list indices must be integers or slices, not str");
    const Value* v = mapping_->dict->find(key);
    if (v == nullptr) fail("KeyError: " + repr(Value::string(key)));
    current_ = *v;
    arglen_ = -1;
    argidx_ = -2;
  }
  bool unused_left() const { return argidx_ < arglen_ && mapping_ == nullptr; }

 private:
  Value current_;
  const List* tuple_ = nullptr;
  const Value* mapping_ = nullptr;
  int64_t arglen_ = -1, argidx_ = -2;
};

// Text padded to the width with spaces (the '0' flag does not apply to text).
std::string pad_text(const std::string& text, const Spec& sp) {
  const int64_t n = sp.width - cp_len(text);
  if (n <= 0) return text;
  return sp.ljust ? text + fill(n, ' ') : fill(n, ' ') + text;
}

// A number: sign, prefix (0x, 0X, 0o) and digits, padded with zeros between the prefix
// and the digits under '0', else with spaces.
std::string pad_number(const std::string& sign, const std::string& prefix, const std::string& body, const Spec& sp) {
  const int64_t n = sp.width - static_cast<int64_t>(sign.size() + prefix.size() + body.size());
  if (n <= 0) return sign + prefix + body;
  if (sp.ljust) return sign + prefix + body + fill(n, ' ');
  if (sp.zero) return sign + prefix + fill(n, '0') + body;
  return fill(n, ' ') + sign + prefix + body;
}

int64_t star_arg(FormatArgs& args) {
  const Value v = args.next();
  if (!v.is_integral()) fail("* wants int");
  return v.as_int();
}

std::string format_integer(const Value& v, uint32_t c, const Spec& sp) {
  const std::string conv = std::string("%") + static_cast<char>(c);
  bool neg = false;
  std::string digits;
  if (v.is_integral()) {
    const int64_t x = v.as_int();
    neg = x < 0;
    uint64_t m = neg ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    const unsigned base = c == 'o' ? 8 : (c == 'x' || c == 'X') ? 16 : 10;
    const char* alphabet = c == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    do {
      digits += alphabet[m % base];
      m /= base;
    } while (m > 0);
    std::reverse(digits.begin(), digits.end());
  } else if (v.kind == Value::Kind::kFloat && (c == 'd' || c == 'i' || c == 'u')) {
    if (std::isnan(v.f)) fail("cannot convert float NaN to integer");
    if (std::isinf(v.f)) fail("cannot convert float infinity to integer");
    const double t = std::trunc(v.f);
    neg = t < 0;
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.0f", std::fabs(t));
    digits = buf;
  } else if (v.is_undefined()) {
    fail(v.s ? *v.s : "value is undefined");
  } else if (c == 'd' || c == 'i' || c == 'u') {
    fail(conv + " format: a real number is required, not " + v.type_name());
  } else {
    fail(conv + " format: an integer is required, not " + v.type_name());
  }
  if (sp.prec > static_cast<int64_t>(digits.size())) digits = fill(sp.prec - static_cast<int64_t>(digits.size()), '0') + digits;
  std::string prefix;
  if (sp.alt && c == 'x') prefix = "0x";
  if (sp.alt && c == 'X') prefix = "0X";
  if (sp.alt && c == 'o') prefix = "0o";
  return pad_number(neg ? "-" : sp.sign ? "+" : sp.blank ? " " : "", prefix, digits, sp);
}

// C's %e %E %f %F %g %G (with '#': alt) — the digits Python's formatting gives too (both
// round the exact binary value correctly).
int print_float(char* buf, size_t size, uint32_t c, bool alt, int prec, double x) {
  switch (c) {
    case 'e': return alt ? std::snprintf(buf, size, "%#.*e", prec, x) : std::snprintf(buf, size, "%.*e", prec, x);
    case 'E': return alt ? std::snprintf(buf, size, "%#.*E", prec, x) : std::snprintf(buf, size, "%.*E", prec, x);
    case 'f': return alt ? std::snprintf(buf, size, "%#.*f", prec, x) : std::snprintf(buf, size, "%.*f", prec, x);
    case 'F': return alt ? std::snprintf(buf, size, "%#.*F", prec, x) : std::snprintf(buf, size, "%.*F", prec, x);
    case 'g': return alt ? std::snprintf(buf, size, "%#.*g", prec, x) : std::snprintf(buf, size, "%.*g", prec, x);
    default: return alt ? std::snprintf(buf, size, "%#.*G", prec, x) : std::snprintf(buf, size, "%.*G", prec, x);
  }
}

std::string format_float(const Value& v, uint32_t c, const Spec& sp) {
  if (v.is_undefined()) fail(v.s ? *v.s : "value is undefined");
  if (!v.is_number()) fail("must be real number, not " + v.type_name());
  const double x = v.as_double();
  const bool upper = c == 'E' || c == 'F' || c == 'G';
  bool neg = false;
  std::string body;
  if (std::isnan(x)) {
    body = upper ? "NAN" : "nan";
  } else if (std::isinf(x)) {
    neg = x < 0;
    body = upper ? "INF" : "inf";
  } else {
    neg = std::signbit(x);
    const int prec = static_cast<int>(std::min<int64_t>(sp.prec < 0 ? 6 : sp.prec, int64_t{1} << 28));
    charge_bytes(prec + 400);
    const int n = print_float(nullptr, 0, c, sp.alt, prec, std::fabs(x));
    body.resize(static_cast<size_t>(n) + 1);
    print_float(body.data(), body.size(), c, sp.alt, prec, std::fabs(x));
    body.resize(static_cast<size_t>(n));
  }
  return pad_number(neg ? "-" : sp.sign ? "+" : sp.blank ? " " : "", "", body, sp);
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args, bool escape_args) {
  FormatArgs state(args);
  std::string out;
  const size_t n = fmt.size();
  size_t pos = 0;
  while (pos < n) {
    charge_steps(1);
    const size_t pct = fmt.find('%', pos);
    if (pct == std::string::npos) {
      out.append(fmt, pos, std::string::npos);
      break;
    }
    out.append(fmt, pos, pct - pos);
    pos = pct + 1;
    if (pos >= n) fail("incomplete format");
    if (fmt[pos] == '%') {
      out += '%';
      ++pos;
      continue;
    }
    Spec sp;
    if (fmt[pos] == '(') {
      int depth = 1;
      size_t k = pos + 1;
      for (; k < n && depth > 0; ++k) {
        if (fmt[k] == '(') ++depth;
        if (fmt[k] == ')') --depth;
      }
      if (depth > 0) fail("incomplete format key");
      state.select_key(fmt.substr(pos + 1, k - pos - 2));
      pos = k;
    }
    for (; pos < n; ++pos) {
      const char f = fmt[pos];
      if (f == '-') sp.ljust = true;
      else if (f == '+') sp.sign = true;
      else if (f == ' ') sp.blank = true;
      else if (f == '#') sp.alt = true;
      else if (f == '0') sp.zero = true;
      else break;
    }
    const auto number = [&](const char* what) {
      int64_t x = 0;
      for (; pos < n && fmt[pos] >= '0' && fmt[pos] <= '9'; ++pos) {
        x = x * 10 + (fmt[pos] - '0');
        if (x > (int64_t{1} << 40)) fail(std::string(what) + " too big");
      }
      return x;
    };
    if (pos < n && fmt[pos] == '*') {
      sp.width = star_arg(state);
      if (sp.width < 0) {
        sp.ljust = true;
        sp.width = -sp.width;
      }
      ++pos;
    } else if (pos < n && fmt[pos] >= '0' && fmt[pos] <= '9') {
      sp.width = number("width");
    }
    if (pos < n && fmt[pos] == '.') {
      ++pos;
      if (pos < n && fmt[pos] == '*') {
        sp.prec = std::max<int64_t>(0, star_arg(state));
        ++pos;
      } else {
        sp.prec = number("precision");
      }
    }
    while (pos < n && (fmt[pos] == 'h' || fmt[pos] == 'l' || fmt[pos] == 'L')) ++pos;
    if (pos >= n) fail("incomplete format");
    const auto chars = utf8_chars(std::string_view(fmt).substr(pos));
    const std::string_view conv = chars.front();
    const uint32_t c = utf8_decode(conv).front();
    const size_t conv_pos = pos;
    pos += conv.size();
    const Value v = state.next();
    if (sp.ljust) sp.zero = false;
    switch (c) {
      case 's':
      case 'r':
      case 'a': {
        std::string text = c == 's' ? to_str(v) : c == 'r' ? repr(v) : ascii_repr(v);
        if (escape_args && !(c == 's' && v.markup)) text = html_escape(text);
        if (sp.prec >= 0) text = cp_prefix(text, sp.prec);
        out += pad_text(text, sp);
        break;
      }
      case 'c': {
        std::string text;
        if (v.is_integral()) {
          const int64_t x = v.as_int();
          if (x < 0 || x > 0x10FFFF) fail("%c arg not in range(0x110000)");
          utf8_append(static_cast<uint32_t>(x), text);
        } else if (v.is_string() && cp_len(v.str_ref()) == 1) {
          text = v.str_ref();
        } else {
          fail("%c requires int or char");
        }
        out += pad_text(text, sp);
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': out += format_integer(v, c, sp); break;
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': out += format_float(v, c, sp); break;
      default: {
        char buf[96];
        std::snprintf(buf, sizeof(buf), "unsupported format character '%s' (0x%x) at index %lld", std::string(conv).c_str(), c,
                      static_cast<long long>(cp_len(std::string_view(fmt).substr(0, conv_pos))));
        fail(buf);
      }
    }
    if (out.size() > (size_t{1} << 30)) fail("format result too large");
  }
  if (state.unused_left()) fail("not all arguments converted during string formatting");
  return out;
}

// ---- HTML ----

namespace {

struct Entity {
  const char* name;   // with its ';' when the reference needs one
  const char* text;   // UTF-8
};

// Named character references html.unescape resolves that this knows: the HTML 4 set (with
// HTML5's values: lang and rang moved to U+27E8/U+27E9), apos, and the legacy names that
// HTML5 accepts without ';'. Sorted by name (byte order) for binary search.
constexpr Entity kNamedEntities[] = {
    {"AElig", "\xc3\x86"}, {"AElig;", "\xc3\x86"}, {"AMP", "&"}, {"AMP;", "&"}, {"Aacute", "\xc3\x81"},
    {"Aacute;", "\xc3\x81"}, {"Acirc", "\xc3\x82"}, {"Acirc;", "\xc3\x82"}, {"Agrave", "\xc3\x80"},
    {"Agrave;", "\xc3\x80"}, {"Alpha;", "\xce\x91"}, {"Aring", "\xc3\x85"}, {"Aring;", "\xc3\x85"},
    {"Atilde", "\xc3\x83"}, {"Atilde;", "\xc3\x83"}, {"Auml", "\xc3\x84"}, {"Auml;", "\xc3\x84"},
    {"Beta;", "\xce\x92"}, {"COPY", "\xc2\xa9"}, {"COPY;", "\xc2\xa9"}, {"Ccedil", "\xc3\x87"},
    {"Ccedil;", "\xc3\x87"}, {"Chi;", "\xce\xa7"}, {"Dagger;", "\xe2\x80\xa1"}, {"Delta;", "\xce\x94"},
    {"ETH", "\xc3\x90"}, {"ETH;", "\xc3\x90"}, {"Eacute", "\xc3\x89"}, {"Eacute;", "\xc3\x89"}, {"Ecirc", "\xc3\x8a"},
    {"Ecirc;", "\xc3\x8a"}, {"Egrave", "\xc3\x88"}, {"Egrave;", "\xc3\x88"}, {"Epsilon;", "\xce\x95"},
    {"Eta;", "\xce\x97"}, {"Euml", "\xc3\x8b"}, {"Euml;", "\xc3\x8b"}, {"GT", ">"}, {"GT;", ">"},
    {"Gamma;", "\xce\x93"}, {"Iacute", "\xc3\x8d"}, {"Iacute;", "\xc3\x8d"}, {"Icirc", "\xc3\x8e"},
    {"Icirc;", "\xc3\x8e"}, {"Igrave", "\xc3\x8c"}, {"Igrave;", "\xc3\x8c"}, {"Iota;", "\xce\x99"},
    {"Iuml", "\xc3\x8f"}, {"Iuml;", "\xc3\x8f"}, {"Kappa;", "\xce\x9a"}, {"LT", "<"}, {"LT;", "<"},
    {"Lambda;", "\xce\x9b"}, {"Mu;", "\xce\x9c"}, {"Ntilde", "\xc3\x91"}, {"Ntilde;", "\xc3\x91"},
    {"Nu;", "\xce\x9d"}, {"OElig;", "\xc5\x92"}, {"Oacute", "\xc3\x93"}, {"Oacute;", "\xc3\x93"},
    {"Ocirc", "\xc3\x94"}, {"Ocirc;", "\xc3\x94"}, {"Ograve", "\xc3\x92"}, {"Ograve;", "\xc3\x92"},
    {"Omega;", "\xce\xa9"}, {"Omicron;", "\xce\x9f"}, {"Oslash", "\xc3\x98"}, {"Oslash;", "\xc3\x98"},
    {"Otilde", "\xc3\x95"}, {"Otilde;", "\xc3\x95"}, {"Ouml", "\xc3\x96"}, {"Ouml;", "\xc3\x96"},
    {"Phi;", "\xce\xa6"}, {"Pi;", "\xce\xa0"}, {"Prime;", "\xe2\x80\xb3"}, {"Psi;", "\xce\xa8"}, {"QUOT", "\x22"},
    {"QUOT;", "\x22"}, {"REG", "\xc2\xae"}, {"REG;", "\xc2\xae"}, {"Rho;", "\xce\xa1"}, {"Scaron;", "\xc5\xa0"},
    {"Sigma;", "\xce\xa3"}, {"THORN", "\xc3\x9e"}, {"THORN;", "\xc3\x9e"}, {"Tau;", "\xce\xa4"},
    {"Theta;", "\xce\x98"}, {"Uacute", "\xc3\x9a"}, {"Uacute;", "\xc3\x9a"}, {"Ucirc", "\xc3\x9b"},
    {"Ucirc;", "\xc3\x9b"}, {"Ugrave", "\xc3\x99"}, {"Ugrave;", "\xc3\x99"}, {"Upsilon;", "\xce\xa5"},
    {"Uuml", "\xc3\x9c"}, {"Uuml;", "\xc3\x9c"}, {"Xi;", "\xce\x9e"}, {"Yacute", "\xc3\x9d"}, {"Yacute;", "\xc3\x9d"},
    {"Yuml;", "\xc5\xb8"}, {"Zeta;", "\xce\x96"}, {"aacute", "\xc3\xa1"}, {"aacute;", "\xc3\xa1"},
    {"acirc", "\xc3\xa2"}, {"acirc;", "\xc3\xa2"}, {"acute", "\xc2\xb4"}, {"acute;", "\xc2\xb4"},
    {"aelig", "\xc3\xa6"}, {"aelig;", "\xc3\xa6"}, {"agrave", "\xc3\xa0"}, {"agrave;", "\xc3\xa0"},
    {"alefsym;", "\xe2\x84\xb5"}, {"alpha;", "\xce\xb1"}, {"amp", "&"}, {"amp;", "&"}, {"and;", "\xe2\x88\xa7"},
    {"ang;", "\xe2\x88\xa0"}, {"apos;", "'"}, {"aring", "\xc3\xa5"}, {"aring;", "\xc3\xa5"},
    {"asymp;", "\xe2\x89\x88"}, {"atilde", "\xc3\xa3"}, {"atilde;", "\xc3\xa3"}, {"auml", "\xc3\xa4"},
    {"auml;", "\xc3\xa4"}, {"bdquo;", "\xe2\x80\x9e"}, {"beta;", "\xce\xb2"}, {"brvbar", "\xc2\xa6"},
    {"brvbar;", "\xc2\xa6"}, {"bull;", "\xe2\x80\xa2"}, {"cap;", "\xe2\x88\xa9"}, {"ccedil", "\xc3\xa7"},
    {"ccedil;", "\xc3\xa7"}, {"cedil", "\xc2\xb8"}, {"cedil;", "\xc2\xb8"}, {"cent", "\xc2\xa2"},
    {"cent;", "\xc2\xa2"}, {"chi;", "\xcf\x87"}, {"circ;", "\xcb\x86"}, {"clubs;", "\xe2\x99\xa3"},
    {"cong;", "\xe2\x89\x85"}, {"copy", "\xc2\xa9"}, {"copy;", "\xc2\xa9"}, {"crarr;", "\xe2\x86\xb5"},
    {"cup;", "\xe2\x88\xaa"}, {"curren", "\xc2\xa4"}, {"curren;", "\xc2\xa4"}, {"dArr;", "\xe2\x87\x93"},
    {"dagger;", "\xe2\x80\xa0"}, {"darr;", "\xe2\x86\x93"}, {"deg", "\xc2\xb0"}, {"deg;", "\xc2\xb0"},
    {"delta;", "\xce\xb4"}, {"diams;", "\xe2\x99\xa6"}, {"divide", "\xc3\xb7"}, {"divide;", "\xc3\xb7"},
    {"eacute", "\xc3\xa9"}, {"eacute;", "\xc3\xa9"}, {"ecirc", "\xc3\xaa"}, {"ecirc;", "\xc3\xaa"},
    {"egrave", "\xc3\xa8"}, {"egrave;", "\xc3\xa8"}, {"empty;", "\xe2\x88\x85"}, {"emsp;", "\xe2\x80\x83"},
    {"ensp;", "\xe2\x80\x82"}, {"epsilon;", "\xce\xb5"}, {"equiv;", "\xe2\x89\xa1"}, {"eta;", "\xce\xb7"},
    {"eth", "\xc3\xb0"}, {"eth;", "\xc3\xb0"}, {"euml", "\xc3\xab"}, {"euml;", "\xc3\xab"}, {"euro;", "\xe2\x82\xac"},
    {"exist;", "\xe2\x88\x83"}, {"fnof;", "\xc6\x92"}, {"forall;", "\xe2\x88\x80"}, {"frac12", "\xc2\xbd"},
    {"frac12;", "\xc2\xbd"}, {"frac14", "\xc2\xbc"}, {"frac14;", "\xc2\xbc"}, {"frac34", "\xc2\xbe"},
    {"frac34;", "\xc2\xbe"}, {"frasl;", "\xe2\x81\x84"}, {"gamma;", "\xce\xb3"}, {"ge;", "\xe2\x89\xa5"}, {"gt", ">"},
    {"gt;", ">"}, {"hArr;", "\xe2\x87\x94"}, {"harr;", "\xe2\x86\x94"}, {"hearts;", "\xe2\x99\xa5"},
    {"hellip;", "\xe2\x80\xa6"}, {"iacute", "\xc3\xad"}, {"iacute;", "\xc3\xad"}, {"icirc", "\xc3\xae"},
    {"icirc;", "\xc3\xae"}, {"iexcl", "\xc2\xa1"}, {"iexcl;", "\xc2\xa1"}, {"igrave", "\xc3\xac"},
    {"igrave;", "\xc3\xac"}, {"image;", "\xe2\x84\x91"}, {"infin;", "\xe2\x88\x9e"}, {"int;", "\xe2\x88\xab"},
    {"iota;", "\xce\xb9"}, {"iquest", "\xc2\xbf"}, {"iquest;", "\xc2\xbf"}, {"isin;", "\xe2\x88\x88"},
    {"iuml", "\xc3\xaf"}, {"iuml;", "\xc3\xaf"}, {"kappa;", "\xce\xba"}, {"lArr;", "\xe2\x87\x90"},
    {"lambda;", "\xce\xbb"}, {"lang;", "\xe2\x9f\xa8"}, {"laquo", "\xc2\xab"}, {"laquo;", "\xc2\xab"},
    {"larr;", "\xe2\x86\x90"}, {"lceil;", "\xe2\x8c\x88"}, {"ldquo;", "\xe2\x80\x9c"}, {"le;", "\xe2\x89\xa4"},
    {"lfloor;", "\xe2\x8c\x8a"}, {"lowast;", "\xe2\x88\x97"}, {"loz;", "\xe2\x97\x8a"}, {"lrm;", "\xe2\x80\x8e"},
    {"lsaquo;", "\xe2\x80\xb9"}, {"lsquo;", "\xe2\x80\x98"}, {"lt", "<"}, {"lt;", "<"}, {"macr", "\xc2\xaf"},
    {"macr;", "\xc2\xaf"}, {"mdash;", "\xe2\x80\x94"}, {"micro", "\xc2\xb5"}, {"micro;", "\xc2\xb5"},
    {"middot", "\xc2\xb7"}, {"middot;", "\xc2\xb7"}, {"minus;", "\xe2\x88\x92"}, {"mu;", "\xce\xbc"},
    {"nabla;", "\xe2\x88\x87"}, {"nbsp", "\xc2\xa0"}, {"nbsp;", "\xc2\xa0"}, {"ndash;", "\xe2\x80\x93"},
    {"ne;", "\xe2\x89\xa0"}, {"ni;", "\xe2\x88\x8b"}, {"not", "\xc2\xac"}, {"not;", "\xc2\xac"},
    {"notin;", "\xe2\x88\x89"}, {"nsub;", "\xe2\x8a\x84"}, {"ntilde", "\xc3\xb1"}, {"ntilde;", "\xc3\xb1"},
    {"nu;", "\xce\xbd"}, {"oacute", "\xc3\xb3"}, {"oacute;", "\xc3\xb3"}, {"ocirc", "\xc3\xb4"},
    {"ocirc;", "\xc3\xb4"}, {"oelig;", "\xc5\x93"}, {"ograve", "\xc3\xb2"}, {"ograve;", "\xc3\xb2"},
    {"oline;", "\xe2\x80\xbe"}, {"omega;", "\xcf\x89"}, {"omicron;", "\xce\xbf"}, {"oplus;", "\xe2\x8a\x95"},
    {"or;", "\xe2\x88\xa8"}, {"ordf", "\xc2\xaa"}, {"ordf;", "\xc2\xaa"}, {"ordm", "\xc2\xba"}, {"ordm;", "\xc2\xba"},
    {"oslash", "\xc3\xb8"}, {"oslash;", "\xc3\xb8"}, {"otilde", "\xc3\xb5"}, {"otilde;", "\xc3\xb5"},
    {"otimes;", "\xe2\x8a\x97"}, {"ouml", "\xc3\xb6"}, {"ouml;", "\xc3\xb6"}, {"para", "\xc2\xb6"},
    {"para;", "\xc2\xb6"}, {"part;", "\xe2\x88\x82"}, {"permil;", "\xe2\x80\xb0"}, {"perp;", "\xe2\x8a\xa5"},
    {"phi;", "\xcf\x86"}, {"pi;", "\xcf\x80"}, {"piv;", "\xcf\x96"}, {"plusmn", "\xc2\xb1"}, {"plusmn;", "\xc2\xb1"},
    {"pound", "\xc2\xa3"}, {"pound;", "\xc2\xa3"}, {"prime;", "\xe2\x80\xb2"}, {"prod;", "\xe2\x88\x8f"},
    {"prop;", "\xe2\x88\x9d"}, {"psi;", "\xcf\x88"}, {"quot", "\x22"}, {"quot;", "\x22"}, {"rArr;", "\xe2\x87\x92"},
    {"radic;", "\xe2\x88\x9a"}, {"rang;", "\xe2\x9f\xa9"}, {"raquo", "\xc2\xbb"}, {"raquo;", "\xc2\xbb"},
    {"rarr;", "\xe2\x86\x92"}, {"rceil;", "\xe2\x8c\x89"}, {"rdquo;", "\xe2\x80\x9d"}, {"real;", "\xe2\x84\x9c"},
    {"reg", "\xc2\xae"}, {"reg;", "\xc2\xae"}, {"rfloor;", "\xe2\x8c\x8b"}, {"rho;", "\xcf\x81"},
    {"rlm;", "\xe2\x80\x8f"}, {"rsaquo;", "\xe2\x80\xba"}, {"rsquo;", "\xe2\x80\x99"}, {"sbquo;", "\xe2\x80\x9a"},
    {"scaron;", "\xc5\xa1"}, {"sdot;", "\xe2\x8b\x85"}, {"sect", "\xc2\xa7"}, {"sect;", "\xc2\xa7"},
    {"shy", "\xc2\xad"}, {"shy;", "\xc2\xad"}, {"sigma;", "\xcf\x83"}, {"sigmaf;", "\xcf\x82"},
    {"sim;", "\xe2\x88\xbc"}, {"spades;", "\xe2\x99\xa0"}, {"sub;", "\xe2\x8a\x82"}, {"sube;", "\xe2\x8a\x86"},
    {"sum;", "\xe2\x88\x91"}, {"sup1", "\xc2\xb9"}, {"sup1;", "\xc2\xb9"}, {"sup2", "\xc2\xb2"},
    {"sup2;", "\xc2\xb2"}, {"sup3", "\xc2\xb3"}, {"sup3;", "\xc2\xb3"}, {"sup;", "\xe2\x8a\x83"},
    {"supe;", "\xe2\x8a\x87"}, {"szlig", "\xc3\x9f"}, {"szlig;", "\xc3\x9f"}, {"tau;", "\xcf\x84"},
    {"there4;", "\xe2\x88\xb4"}, {"theta;", "\xce\xb8"}, {"thetasym;", "\xcf\x91"}, {"thinsp;", "\xe2\x80\x89"},
    {"thorn", "\xc3\xbe"}, {"thorn;", "\xc3\xbe"}, {"tilde;", "\xcb\x9c"}, {"times", "\xc3\x97"},
    {"times;", "\xc3\x97"}, {"trade;", "\xe2\x84\xa2"}, {"uArr;", "\xe2\x87\x91"}, {"uacute", "\xc3\xba"},
    {"uacute;", "\xc3\xba"}, {"uarr;", "\xe2\x86\x91"}, {"ucirc", "\xc3\xbb"}, {"ucirc;", "\xc3\xbb"},
    {"ugrave", "\xc3\xb9"}, {"ugrave;", "\xc3\xb9"}, {"uml", "\xc2\xa8"}, {"uml;", "\xc2\xa8"},
    {"upsih;", "\xcf\x92"}, {"upsilon;", "\xcf\x85"}, {"uuml", "\xc3\xbc"}, {"uuml;", "\xc3\xbc"},
    {"weierp;", "\xe2\x84\x98"}, {"xi;", "\xce\xbe"}, {"yacute", "\xc3\xbd"}, {"yacute;", "\xc3\xbd"},
    {"yen", "\xc2\xa5"}, {"yen;", "\xc2\xa5"}, {"yuml", "\xc3\xbf"}, {"yuml;", "\xc3\xbf"}, {"zeta;", "\xce\xb6"},
    {"zwj;", "\xe2\x80\x8d"}, {"zwnj;", "\xe2\x80\x8c"},
};

const char* find_entity(std::string_view name) {
  const Entity* b = std::begin(kNamedEntities);
  const Entity* e = std::end(kNamedEntities);
  const Entity* it = std::lower_bound(b, e, name, [](const Entity& x, std::string_view k) { return std::string_view(x.name) < k; });
  return it != e && std::string_view(it->name) == name ? it->text : nullptr;
}

// html.unescape's numeric reference: the Windows-1252 rescue of 0x80-0x9F, U+FFFD for
// NUL, surrogates and out of range, nothing for the code points HTML forbids.
std::string numeric_reference(uint64_t num) {
  static constexpr uint16_t kCp1252[32] = {0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021,
                                           0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x8D,   0x017D, 0x8F,
                                           0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
                                           0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};
  std::string out;
  if (num == 0) {
    utf8_append(0xFFFD, out);
  } else if (num == 0x0D) {
    out = "\r";
  } else if (num >= 0x80 && num <= 0x9F) {
    utf8_append(kCp1252[num - 0x80], out);
  } else if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) {
    utf8_append(0xFFFD, out);
  } else if ((num >= 0x1 && num <= 0x8) || num == 0xB || (num >= 0xE && num <= 0x1F) || num == 0x7F ||
             (num >= 0xFDD0 && num <= 0xFDEF) || (num & 0xFFFE) == 0xFFFE) {
    return out;
  } else {
    utf8_append(static_cast<uint32_t>(num), out);
  }
  return out;
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string html_unescape(std::string_view s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t amp = s.find('&', pos);
    if (amp == std::string_view::npos) {
      out.append(s.substr(pos));
      break;
    }
    out.append(s.substr(pos, amp - pos));
    size_t k = amp + 1;
    if (k < s.size() && s[k] == '#') {
      const bool hex = k + 1 < s.size() && (s[k + 1] == 'x' || s[k + 1] == 'X');
      size_t d = k + (hex ? 2 : 1), e = d;
      uint64_t num = 0;
      while (e < s.size() && (hex ? is_hex(s[e]) : (s[e] >= '0' && s[e] <= '9'))) {
        const char c = s[e++];
        const unsigned digit = c <= '9' ? static_cast<unsigned>(c - '0') : static_cast<unsigned>((c | 0x20) - 'a' + 10);
        num = std::min<uint64_t>(num * (hex ? 16 : 10) + digit, uint64_t{1} << 40);
      }
      if (e == d) {  // "&#" or "&#x" without digits is no reference
        out += '&';
        pos = k;
        continue;
      }
      if (e < s.size() && s[e] == ';') ++e;
      out += numeric_reference(num);
      pos = e;
      continue;
    }
    // a name: up to 32 characters other than \t \n \f space < & # ;, then an optional ';'
    size_t e = k;
    int count = 0;
    while (e < s.size() && count < 32 && std::strchr("\t\n\f <&#;", s[e]) == nullptr) {
      size_t len = 1;
      while (e + len < s.size() && (static_cast<unsigned char>(s[e + len]) >> 6) == 0x2) ++len;
      e += len;
      ++count;
    }
    if (count == 0) {
      out += '&';
      pos = k;
      continue;
    }
    if (e < s.size() && s[e] == ';') ++e;
    const std::string_view ref = s.substr(k, e - k);
    if (const char* text = find_entity(ref)) {
      out += text;
    } else {
      // the longest prefix (of at least two characters) that is a name
      bool found = false;
      for (size_t x = ref.size() - 1; x >= 2 && !found; --x) {
        if (const char* text = find_entity(ref.substr(0, x))) {
          out += text;
          out.append(ref.substr(x));
          found = true;
        }
      }
      if (!found) {
        out += '&';
        out.append(ref);
      }
    }
    pos = e;
  }
  return out;
}

std::string strip_tags(std::string_view s) {
  std::string v(s);
  for (size_t start; (start = v.find("<!--")) != std::string::npos;) {
    const size_t end = v.find("-->", start);
    if (end == std::string::npos) break;
    v.erase(start, end + 3 - start);
  }
  for (size_t start; (start = v.find('<')) != std::string::npos;) {
    const size_t end = v.find('>', start);
    if (end == std::string::npos) break;
    v.erase(start, end + 1 - start);
  }
  // " ".join(v.split())
  std::string joined;
  size_t pos = 0;
  while (true) {
    for (size_t len; (len = py_space_len(v, pos)) > 0;) pos += len;
    if (pos >= v.size()) break;
    size_t end = pos;
    while (end < v.size() && py_space_len(v, end) == 0) ++end;
    if (!joined.empty()) joined += ' ';
    joined.append(v, pos, end - pos);
    pos = end;
  }
  return html_unescape(joined);
}

std::string url_quote(std::string_view s, bool for_qs) {
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                            c == '.' || c == '-' || c == '~';
    if (unreserved || (!for_qs && c == '/')) {
      out += static_cast<char>(c);
    } else if (for_qs && c == ' ') {
      out += '+';
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string py_center(const std::string& s, int64_t width) {
  const int64_t marg = width - cp_len(s);
  if (marg <= 0) return s;
  const int64_t left = marg / 2 + (marg & width & 1);
  return fill(left, ' ') + s + fill(marg - left, ' ');
}

// ---- textwrap ----

namespace {

using Chunk = std::vector<uint32_t>;

bool tw_space(uint32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == 0x0B || c == 0x0C || c == '\r'; }
bool tw_letter(uint32_t c) { return py_is_word_char(c) && !py_is_decimal(c); }
bool tw_word_punct(uint32_t c) {
  return py_is_word_char(c) || c == '!' || c == '"' || c == '\'' || c == '&' || c == '.' || c == ',' || c == '?';
}

bool all_space(const Chunk& c) {
  std::string s;
  for (uint32_t cp : c) utf8_append(cp, s);
  return py_strip(s, true, true).empty();
}

// The chunks TextWrapper.wordsep_re (break_on_hyphens) or wordsep_simple_re splits text
// into: whitespace runs (ASCII whitespace only), words, and the pieces of hyphenated words
// and em-dashes ("--") that a line may break after.
std::vector<Chunk> split_chunks(const std::vector<uint32_t>& t, bool break_on_hyphens) {
  const size_t n = t.size();
  const auto at = [&](size_t i) -> uint32_t { return i < n ? t[i] : 0; };
  // End of a run of two or more '-' from i that a word character follows, or 0.
  const auto em_dash_end = [&](size_t i) -> size_t {
    size_t q = i;
    while (q < n && t[q] == '-') ++q;
    return q - i >= 2 && q < n && py_is_word_char(t[q]) ? q : 0;
  };
  std::vector<Chunk> chunks;
  size_t p = 0;
  while (p < n) {
    charge_steps(1);
    size_t e = p;
    if (tw_space(t[p])) {
      while (e < n && tw_space(t[e])) ++e;
    } else if (!break_on_hyphens) {
      while (e < n && !tw_space(t[e])) ++e;
    } else if (t[p] == '-' && p > 0 && tw_word_punct(t[p - 1]) && em_dash_end(p) != 0) {
      e = em_dash_end(p);  // an em-dash between words
    } else {
      // the shortest run of non-space characters that ends a word, ends a hyphenated
      // part (letters on both sides), or stops before an em-dash
      for (e = p + 1;; ++e) {
        if (e >= n || tw_space(t[e])) break;
        if (t[e] != '-') continue;
        const bool behind = (e >= 2 && tw_letter(t[e - 2]) && tw_letter(t[e - 1])) ||
                            (e >= 3 && tw_letter(t[e - 3]) && t[e - 2] == '-' && tw_letter(t[e - 1]));
        const bool ahead = tw_letter(at(e + 1)) && ((at(e + 2) == '-' && tw_letter(at(e + 3))) || tw_letter(at(e + 2)));
        if (behind && ahead) {
          ++e;
          break;
        }
        if (tw_word_punct(t[e - 1]) && em_dash_end(e) != 0) break;
      }
    }
    chunks.emplace_back(t.begin() + static_cast<std::ptrdiff_t>(p), t.begin() + static_cast<std::ptrdiff_t>(e));
    p = e;
  }
  return chunks;
}

}  // namespace

std::vector<std::string> text_wrap(std::string_view text, int64_t width, bool break_long_words, bool break_on_hyphens) {
  if (width <= 0) fail("invalid width " + std::to_string(width) + " (must be > 0)");
  std::vector<Chunk> chunks = split_chunks(utf8_decode(text), break_on_hyphens);
  std::reverse(chunks.begin(), chunks.end());  // a stack: the next chunk is at the back
  std::vector<std::string> lines;
  while (!chunks.empty()) {
    charge_steps(1);
    std::vector<Chunk> cur;
    int64_t cur_len = 0;
    if (!lines.empty() && all_space(chunks.back())) chunks.pop_back();  // no line starts with space
    while (!chunks.empty() && cur_len + static_cast<int64_t>(chunks.back().size()) <= width) {
      cur_len += static_cast<int64_t>(chunks.back().size());
      cur.push_back(std::move(chunks.back()));
      chunks.pop_back();
    }
    if (!chunks.empty() && static_cast<int64_t>(chunks.back().size()) > width) {
      // a chunk longer than any line
      if (break_long_words) {
        const int64_t space_left = width - cur_len;
        Chunk& chunk = chunks.back();
        int64_t end = space_left;
        if (break_on_hyphens && static_cast<int64_t>(chunk.size()) > space_left) {
          int64_t hyphen = -1;  // the last '-' before space_left, with something else before it
          for (int64_t k = space_left - 1; k >= 0; --k) {
            if (chunk[static_cast<size_t>(k)] == '-') {
              hyphen = k;
              break;
            }
          }
          if (hyphen > 0 && std::any_of(chunk.begin(), chunk.begin() + hyphen, [](uint32_t c) { return c != '-'; })) {
            end = hyphen + 1;
          }
        }
        cur.emplace_back(chunk.begin(), chunk.begin() + end);
        chunk.erase(chunk.begin(), chunk.begin() + end);
      } else if (cur.empty()) {
        cur.push_back(std::move(chunks.back()));
        chunks.pop_back();
      }
    }
    if (!cur.empty() && all_space(cur.back())) cur.pop_back();  // nor ends with it
    if (!cur.empty()) {
      std::string line;
      for (const Chunk& c : cur) line += encode(c, 0, c.size());
      lines.push_back(std::move(line));
    }
  }
  return lines;
}

// ---- pprint ----

namespace {

class PrettyPrinter {
 public:
  std::string out;

  // pprint's _safe_repr: repr with dicts sorted by key.
  static std::string safe_repr(const Value& v) {
    charge_steps(1);
    if (v.is_list() && !v.is_group) {
      if (v.list->empty()) return v.is_tuple ? "()" : "[]";
      std::string s = v.is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) s += (k ? ", " : "") + safe_repr((*v.list)[k]);
      charge_bytes(static_cast<int64_t>(s.size()));
      return s + (!v.is_tuple ? "]" : v.list->size() == 1 ? ",)" : ")");
    }
    if (v.is_dict() && !v.dict->is_namespace) {
      std::string s = "{";
      bool first = true;
      for (const auto* kv : sorted_items(v)) {
        s += (first ? "" : ", ") + repr(Value::string(kv->first)) + ": " + safe_repr(kv->second);
        first = false;
      }
      charge_bytes(static_cast<int64_t>(s.size()));
      return s + "}";
    }
    return repr(v);
  }

  void format(const Value& v, int64_t indent, int64_t allowance, int level) {
    const std::string rep = safe_repr(v);
    if (cp_len(rep) > kWidth - indent - allowance) {
      if (v.is_list() && !v.is_group) {
        const std::string end = !v.is_tuple ? "]" : v.list->size() == 1 ? ",)" : ")";
        out += v.is_tuple ? '(' : '[';
        format_items(*v.list, indent, allowance + static_cast<int64_t>(end.size()), level + 1);
        out += end;
        return;
      }
      if (v.is_dict() && !v.dict->is_namespace) {
        out += '{';
        format_dict_items(sorted_items(v), indent, allowance + 1, level + 1);
        out += '}';
        return;
      }
      if (v.is_string() && !v.markup) {
        format_str(v.str_ref(), indent, allowance, level + 1);
        return;
      }
    }
    out += rep;
  }

 private:
  static constexpr int64_t kWidth = 80;

  static std::vector<const std::pair<std::string, Value>*> sorted_items(const Value& v) {
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& kv : v.dict->items) items.push_back(&kv);
    std::sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
    return items;
  }

  void format_items(const List& items, int64_t indent, int64_t allowance, int level) {
    indent += 1;
    std::string delim = ",\n";
    delim += fill(indent, ' ');
    for (size_t k = 0; k < items.size(); ++k) {
      if (k > 0) out += delim;
      format(items[k], indent, k + 1 == items.size() ? allowance : 1, level);
    }
  }

  void format_dict_items(const std::vector<const std::pair<std::string, Value>*>& items, int64_t indent,
                         int64_t allowance, int level) {
    indent += 1;
    std::string delim = ",\n";
    delim += fill(indent, ' ');
    for (size_t k = 0; k < items.size(); ++k) {
      const std::string key = repr(Value::string(items[k]->first));
      out += key + ": ";
      format(items[k]->second, indent + cp_len(key) + 2, k + 1 == items.size() ? allowance : 1, level);
      if (k + 1 < items.size()) out += delim;
    }
  }

  // A long string as adjacent literals, split at line ends and then between words;
  // parenthesised at the top level.
  void format_str(const std::string& s, int64_t indent, int64_t allowance, int level) {
    const std::vector<std::string> lines = py_splitlines(s, true);
    if (level == 1) {
      indent += 1;
      allowance += 1;
    }
    int64_t max_width1 = kWidth - indent;
    const int64_t max_width = kWidth - indent;
    std::vector<std::string> chunks;
    std::string rep;
    for (size_t i = 0; i < lines.size(); ++i) {
      const bool last_line = i + 1 == lines.size();
      rep = repr(Value::string(lines[i]));
      if (last_line) max_width1 -= allowance;
      if (cp_len(rep) <= max_width1) {
        chunks.push_back(rep);
        continue;
      }
      // alternating (non-space, space) parts: \S*\s*
      std::vector<std::string> parts;
      const std::string& line = lines[i];
      for (size_t pos = 0; pos < line.size();) {
        size_t end = pos;
        while (end < line.size() && py_space_len(line, end) == 0) ++end;
        for (size_t len; (len = py_space_len(line, end)) > 0;) end += len;
        parts.push_back(line.substr(pos, end - pos));
        pos = end;
      }
      int64_t max_width2 = max_width;
      std::string current;
      for (size_t j = 0; j < parts.size(); ++j) {
        const std::string candidate = current + parts[j];
        if (j + 1 == parts.size() && last_line) max_width2 -= allowance;
        if (cp_len(repr(Value::string(candidate))) > max_width2) {
          if (!current.empty()) chunks.push_back(repr(Value::string(current)));
          current = parts[j];
        } else {
          current = candidate;
        }
      }
      if (!current.empty()) chunks.push_back(repr(Value::string(current)));
    }
    if (chunks.size() == 1) {
      out += rep;
      return;
    }
    if (level == 1) out += '(';
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (i > 0) {
        out += '\n';
        out += fill(indent, ' ');
      }
      out += chunks[i];
    }
    if (level == 1) out += ')';
  }
};

}  // namespace

std::string pformat(const Value& v) {
  PrettyPrinter p;
  p.format(v, 0, 0, 0);
  return std::move(p.out);
}

std::string filesize_format(double bytes, bool binary) {
  const double base = binary ? 1024 : 1000;
  static const char* const kDecimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static const char* const kBinary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  // base ** (i + 2) as a double; Python compares bytes with the exact integer, which is
  // bytes <= unit where the double is below it (1e24 is 10**24 - 16777216)
  static const double kDecimalUnits[] = {1e6, 1e9, 1e12, 1e15, 1e18, 1e21, 1e24, 1e27};
  char buf[512];
  if (bytes == 1) return "1 Byte";
  if (bytes < base) {
    if (std::isinf(bytes)) fail("cannot convert float infinity to integer");
    std::snprintf(buf, sizeof(buf), "%.0f Bytes", std::trunc(bytes) == 0 ? 0.0 : std::trunc(bytes));
    return buf;
  }
  double unit = 0;
  const char* prefix = nullptr;
  for (int i = 0; i < 8; ++i) {
    unit = binary ? std::ldexp(1.0, 10 * (i + 2)) : kDecimalUnits[i];
    prefix = binary ? kBinary[i] : kDecimal[i];
    if (bytes < unit || (!binary && i == 6 && bytes == unit)) break;
  }
  const double x = base * bytes / unit;
  if (std::isnan(x)) return std::string("nan ") + prefix;
  if (std::isinf(x)) return std::string("inf ") + prefix;
  std::snprintf(buf, sizeof(buf), "%.1f %s", x, prefix);
  return buf;
}

}  // namespace specula::jinja
