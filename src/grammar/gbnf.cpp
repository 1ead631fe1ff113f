// grammar/gbnf.cpp — see gbnf.h.
#include "grammar/gbnf.h"

#include <cctype>
#include <cstdio>
#include <set>
#include <vector>

namespace specula {
namespace {

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

std::string rule_name(std::string_view n) {
  std::string out = "r_";
  for (char c : n) {
    if (c == '-') out += "_h";
    else if (c >= 'A' && c <= 'Z') out += std::string("_u") + static_cast<char>(c - 'A' + 'a');
    else out += c;
  }
  return out;
}

// A regex for one code point, safe inside and outside a class and inside /.../.
std::string rx_char(uint32_t cp) {
  if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9')) return std::string(1, static_cast<char>(cp));
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\x{%X}", cp);
  return buf;
}

class Converter {
 public:
  explicit Converter(std::string_view s) : s_(s) {}

  Result<std::string> run() {
    std::string body;
    skip_ws();
    if (pos_ >= s_.size()) return err("the grammar is empty");
    while (pos_ < s_.size()) {
      const size_t line = line_;
      std::string name = word();
      if (name.empty()) return err("expected a rule name");
      skip_ws();
      if (s_.substr(pos_, 3) != "::=") return err("expected '::=' after '" + name + "'");
      pos_ += 3;
      if (defined_.count(name)) return err("rule '" + name + "' defined twice");
      defined_.insert(name);
      std::string rhs;
      if (auto st = alternates(rhs, /*nested=*/false); !st.is_ok()) return st;
      body += rule_name(name) + ": " + rhs + "\n";
      (void)line;
    }
    if (!defined_.count("root")) return Status::error("GBNF: no rule 'root'");
    for (const auto& [name, line] : used_)
      if (!defined_.count(name)) return Status::error("GBNF line " + std::to_string(line) + ": undefined rule '" + name + "'");
    return "start: r_root\n" + body;
  }

 private:
  Status err(const std::string& m) const { return Status::error("GBNF line " + std::to_string(line_) + ": " + m); }

  void skip_ws() {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        if (c == '\n') ++line_;
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string word() {
    const size_t b = pos_;
    while (pos_ < s_.size() && word_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(b, pos_ - b));
  }

  // Whether a rule definition starts here: name ::= .
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < s_.size() && word_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  Status alternates(std::string& out, bool nested) {
    std::string seq;
    if (auto st = sequence(seq, nested); !st.is_ok()) return st;
    out += seq;
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      seq.clear();
      if (auto st = sequence(seq, nested); !st.is_ok()) return st;
      out += " | " + seq;
    }
    return Status::ok();
  }

  // Reads one code point of a literal or class (escapes decoded).
  Status literal_char(uint32_t& cp) {
    if (pos_ >= s_.size()) return err("unexpected end of grammar");
    unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c == '\\') {
      if (pos_ + 1 >= s_.size()) return err("unexpected end after '\\'");
      const char e = s_[pos_ + 1];
      pos_ += 2;
      int hex = 0;
      switch (e) {
        case 'n': cp = '\n'; return Status::ok();
        case 'r': cp = '\r'; return Status::ok();
        case 't': cp = '\t'; return Status::ok();
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': cp = static_cast<uint8_t>(e); return Status::ok();
        case 'x': hex = 2; break;
        case 'u': hex = 4; break;
        case 'U': hex = 8; break;
        default: return err(std::string("unknown escape '\\") + e + "'");
      }
      cp = 0;
      for (int i = 0; i < hex; ++i, ++pos_) {
        if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) return err("bad hex escape");
        const char h = s_[pos_];
        cp = cp * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      // (\x00 is fine: llama.cpp's JSON grammar excludes [\x00-\x1F] from strings.)
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return err("escape is not a Unicode scalar value");
      return Status::ok();
    }
    // A UTF-8 sequence.
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + n > s_.size()) return err("invalid UTF-8");
    cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const unsigned char d = static_cast<unsigned char>(s_[pos_ + i]);
      if ((d & 0xC0) != 0x80) return err("invalid UTF-8");
      cp = (cp << 6) | (d & 0x3F);
    }
    if (c == '\n') ++line_;
    pos_ += n;
    return Status::ok();
  }

  Status sequence(std::string& out, bool nested) {
    std::vector<std::string> items;
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size()) break;
      const char c = s_[pos_];
      if (c == '|' || c == ')') break;
      if (!nested && at_rule_start()) break;
      std::string item;
      if (c == '"') {
        ++pos_;
        std::vector<std::string> chars;
        while (pos_ < s_.size() && s_[pos_] != '"') {
          uint32_t cp;
          if (auto st = literal_char(cp); !st.is_ok()) return st;
          chars.push_back("/" + rx_char(cp) + "/");
        }
        if (pos_ >= s_.size()) return err("unterminated string");
        ++pos_;
        if (chars.empty()) item = "\"\"";
        else if (chars.size() == 1) item = chars[0];
        else {
          item = "(";
          for (size_t i = 0; i < chars.size(); ++i) item += (i ? " " : "") + chars[i];
          item += ")";
        }
      } else if (c == '[') {
        ++pos_;
        std::string cls = "[";
        if (pos_ < s_.size() && s_[pos_] == '^') {
          cls += '^';
          ++pos_;
        }
        bool any = false;
        while (pos_ < s_.size() && s_[pos_] != ']') {
          uint32_t lo, hi;
          if (auto st = literal_char(lo); !st.is_ok()) return st;
          hi = lo;
          if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
            ++pos_;
            if (auto st = literal_char(hi); !st.is_ok()) return st;
            if (hi < lo) return err("character range out of order");
          }
          cls += rx_char(lo);
          if (hi != lo) cls += "-" + rx_char(hi);
          any = true;
        }
        if (pos_ >= s_.size()) return err("unterminated character class");
        ++pos_;
        if (!any) return err("empty character class");
        item = "/" + cls + "]/";
      } else if (c == '.') {
        ++pos_;
        item = "/(?s:.)/";
      } else if (c == '(') {
        ++pos_;
        std::string inner;
        if (auto st = alternates(inner, true); !st.is_ok()) return st;
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != ')') return err("expected ')'");
        ++pos_;
        item = "(" + inner + ")";
      } else if (word_char(c)) {
        const std::string name = word();
        used_.push_back({name, line_});
        item = rule_name(name);
      } else {
        return err(std::string("unexpected character '") + c + "'");
      }
      // Repetition suffixes.
      for (;;) {
        if (pos_ < s_.size() && (s_[pos_] == '*' || s_[pos_] == '+' || s_[pos_] == '?')) {
          item = "(" + item + ")" + s_[pos_];
          ++pos_;
        } else if (pos_ < s_.size() && s_[pos_] == '{') {
          const size_t b = pos_;
          ++pos_;
          auto num = [&](long& v) {
            const size_t s0 = pos_;
            v = 0;
            while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])) && v < 100000) v = v * 10 + (s_[pos_++] - '0');
            return pos_ > s0;
          };
          long m = 0, n = -1;
          skip_ws();
          if (!num(m)) return err("expected a number in '{'");
          skip_ws();
          bool comma = false;
          if (pos_ < s_.size() && s_[pos_] == ',') {
            comma = true;
            ++pos_;
            skip_ws();
            if (!num(n)) n = -1;
            skip_ws();
          } else {
            n = m;
          }
          if (pos_ >= s_.size() || s_[pos_] != '}') return err("expected '}'");
          ++pos_;
          if (n >= 0 && n < m) return err("repetition {m,n} with n < m");
          if (m > 10000 || n > 10000) return err("repetition count over 10000");
          (void)b;
          item = "(" + item + "){" + std::to_string(m) + (comma ? "," + (n >= 0 ? std::to_string(n) : std::string()) : "") + "}";
        } else {
          break;
        }
      }
      items.push_back(std::move(item));
    }
    if (items.empty()) {
      out += "\"\"";
      return Status::ok();
    }
    for (size_t i = 0; i < items.size(); ++i) out += (i ? " " : "") + items[i];
    return Status::ok();
  }

  std::string_view s_;
  size_t pos_ = 0;
  size_t line_ = 1;
  std::set<std::string> defined_;
  std::vector<std::pair<std::string, size_t>> used_;
};

}  // namespace

Result<std::string> gbnf_to_lark(std::string_view gbnf) { return Converter(gbnf).run(); }

}  // namespace specula
