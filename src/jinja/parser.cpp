// jinja/parser.cpp — lexer and recursive-descent parser for chat templates.
//
// The lexer reproduces Jinja2 3.x's tokeniter (jinja2/lexer.py) for the environment
// transformers uses (trim_blocks=True, lstrip_blocks=True, default delimiters):
//   - "\r\n" and "\r" become "\n"; a single trailing newline is dropped;
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}`
//     all whitespace after it;
//   - lstrip_blocks: spaces/tabs between a line start and `{%` / `{#` are dropped
//     (not before `{{`, not with `{%+`);
//   - trim_blocks: one newline right after `%}` / `#}` is dropped (not with `+%}`);
//   - inside a tag, `}}` / `%}` only end it when no bracket is open.
// The parser follows jinja2/parser.py's grammar and precedence. Does not evaluate.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/utf8.h"
#include "jinja/ast.h"

namespace specula::jinja {
namespace {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type = Tok::kEof;
  std::string text;  // kText data, kName/kOp spelling, kString decoded value
  int64_t i = 0;
  double f = 0;
  size_t offset = 0;
};

class Lexer {
 public:
  explicit Lexer(const std::string& source) {
    // Newline normalisation and the dropped trailing newline (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t k = 0; k < source.size(); ++k) {
      if (source[k] == '\r') {
        src_ += '\n';
        if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
      } else {
        src_ += source[k];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t k = 0; k < src_.size(); ++k) {
      if (src_[k] == '\n') line_starts_.push_back(k + 1);
    }
  }

  std::vector<Token> run() {
    const size_t n = src_.size();
    while (pos_ < n) {
      size_t t = pos_;
      while (t + 1 < n && !(src_[t] == '{' && (src_[t + 1] == '{' || src_[t + 1] == '%' || src_[t + 1] == '#'))) ++t;
      if (t + 1 >= n) {
        push_text(src_.substr(pos_), pos_);
        break;
      }
      std::string text = src_.substr(pos_, t - pos_);
      const char kind = src_[t + 1];
      size_t p = t + 2;
      char sign = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(p, &raw_end);
      strip_before_tag(text, sign, kind == '{');
      push_text(std::move(text), pos_);
      line_starting_ = false;
      if (raw) {
        line_starting_ = raw_end > 0 && src_[raw_end - 1] == '\n';
        lex_raw_body(raw_end, t);
      } else if (kind == '#') {
        lex_comment(p, t);
      } else {
        lex_tag(kind == '{', p, t);
      }
    }
    Token eof;
    eof.offset = src_.size();
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

  std::string where(size_t offset) const { return location(line_starts_, offset); }

  static std::string location(const std::vector<size_t>& line_starts, size_t offset) {
    const auto it = std::upper_bound(line_starts.begin(), line_starts.end(), offset) - 1;
    return std::to_string(it - line_starts.begin() + 1) + ":" + std::to_string(offset - *it + 1);
  }
  const std::vector<size_t>& line_starts() const { return line_starts_; }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& what) const { throw JinjaError(where(offset) + ": " + what); }

  bool starts(size_t p, const char* s) const { return src_.compare(p, std::strlen(s), s) == 0; }
  size_t skip_space(size_t p) const {
    for (size_t len; (len = py_space_len(src_, p)) > 0;) p += len;
    return p;
  }

  void push_text(std::string text, size_t offset) {
    if (text.empty()) return;
    Token tok;
    tok.type = Tok::kText;
    tok.text = std::move(text);
    tok.offset = offset;
    tokens_.push_back(std::move(tok));
  }
  void push(Tok type, size_t offset, std::string text = {}) {
    Token tok;
    tok.type = type;
    tok.offset = offset;
    tok.text = std::move(text);
    tokens_.push_back(std::move(tok));
  }

  // jinja2 OptionalLStrip: `-` strips all whitespace; otherwise lstrip_blocks drops the
  // whitespace-only tail of the last line before a block or comment tag.
  void strip_before_tag(std::string& text, char sign, bool is_variable) const {
    if (sign == '-') {
      text = py_strip(text, false, true);
    } else if (sign != '+' && !is_variable) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size()) {
        size_t p = l_pos;
        for (size_t len; (len = py_space_len(text, p)) > 0;) p += len;
        if (p == text.size()) text.resize(l_pos);
      }
    }
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})` starting after the sign.
  bool match_raw_begin(size_t p, size_t* end) const {
    p = skip_space(p);
    if (!starts(p, "raw")) return false;
    p = skip_space(p + 3);
    if (starts(p, "-%}")) {
      *end = skip_space(p + 3);
      return true;
    }
    if (starts(p, "%}")) {
      *end = p + 2;
      return true;
    }
    return false;
  }

  void lex_raw_body(size_t p, size_t tag_offset) {
    const size_t n = src_.size();
    for (size_t q = p; q + 1 < n; ++q) {
      if (!starts(q, "{%")) continue;
      size_t r = q + 2;
      char sign = 0;
      if (r < n && (src_[r] == '-' || src_[r] == '+')) sign = src_[r++];
      r = skip_space(r);
      if (!starts(r, "endraw")) continue;
      r = skip_space(r + 6);
      size_t end;
      if (starts(r, "+%}")) {
        end = r + 3;
      } else if (starts(r, "-%}")) {
        end = skip_space(r + 3);
      } else if (starts(r, "%}")) {
        end = r + 2 + (r + 2 < n && src_[r + 2] == '\n' ? 1 : 0);
      } else {
        continue;
      }
      std::string text = src_.substr(p, q - p);
      strip_before_tag(text, sign, false);
      push_text(std::move(text), p);
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    fail(tag_offset, "missing end of raw directive");
  }

  void lex_comment(size_t p, size_t tag_offset) {
    const size_t n = src_.size();
    for (size_t q = p; q < n; ++q) {
      size_t end = 0;
      if (starts(q, "+#}")) {
        end = q + 3;
      } else if (starts(q, "-#}")) {
        end = skip_space(q + 3);
      } else if (starts(q, "#}")) {
        end = q + 2 + (q + 2 < n && src_[q + 2] == '\n' ? 1 : 0);
      } else {
        continue;
      }
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    fail(tag_offset, "missing end of comment tag");
  }

  void lex_tag(bool variable, size_t p, size_t tag_offset) {
    push(variable ? Tok::kVarBegin : Tok::kBlockBegin, tag_offset);
    const size_t n = src_.size();
    std::vector<char> balance;
    while (true) {
      p = skip_space(p);
      if (p >= n) fail(tag_offset, variable ? "unclosed '{{' (missing '}}')" : "unclosed '{%' (missing '%}')");
      if (balance.empty()) {
        const char* close = variable ? "}}" : "%}";
        size_t end = 0;
        if (!variable && src_[p] == '+' && starts(p + 1, close)) {
          end = p + 3;
        } else if (src_[p] == '-' && starts(p + 1, close)) {
          end = skip_space(p + 3);
        } else if (starts(p, close)) {
          end = p + 2 + (!variable && p + 2 < n && src_[p + 2] == '\n' ? 1 : 0);
        }
        if (end != 0) {
          push(variable ? Tok::kVarEnd : Tok::kBlockEnd, p);
          line_starting_ = src_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      p = lex_one(p, balance);
    }
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

  // Digits with single '_' separators starting at p; returns the end (p when none).
  size_t digits(size_t p, int base = 10) const {
    const auto ok = [&](char c) {
      if (base == 16) return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      if (base == 8) return c >= '0' && c <= '7';
      if (base == 2) return c == '0' || c == '1';
      return is_digit(c);
    };
    size_t q = p;
    while (q < src_.size() && ok(src_[q])) {
      ++q;
      if (q + 1 < src_.size() && src_[q] == '_' && ok(src_[q + 1])) ++q;
    }
    return q;
  }

  size_t lex_one(size_t p, std::vector<char>& balance) {
    const size_t n = src_.size();
    const char c = src_[p];
    if (is_digit(c)) return lex_number(p);
    if (is_name_start(c)) {
      size_t q = p;
      while (q < n && (is_name_start(src_[q]) || is_digit(src_[q]))) ++q;
      push(Tok::kName, p, src_.substr(p, q - p));
      return q;
    }
    if (c == '\'' || c == '"') return lex_string(p);
    static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                       "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      if (!starts(p, op)) continue;
      const char o = op[0];
      if (op[1] == '\0' && (o == '(' || o == '[' || o == '{')) {
        balance.push_back(o == '(' ? ')' : o == '[' ? ']' : '}');
      } else if (op[1] == '\0' && (o == ')' || o == ']' || o == '}')) {
        if (balance.empty()) fail(p, std::string("unexpected '") + o + "'");
        if (balance.back() != o) fail(p, std::string("unexpected '") + o + "', expected '" + balance.back() + "'");
        balance.pop_back();
      }
      push(Tok::kOp, p, op);
      return p + std::strlen(op);
    }
    fail(p, "unexpected character '" + std::string(1, c) + "'");
  }

  size_t lex_number(size_t p) {
    const size_t n = src_.size();
    // float: digits ( (.digits)? e[+-]?digits | .digits )
    const size_t int_end = digits(p);
    size_t q = int_end;
    bool is_float = false;
    if (q + 1 < n && src_[q] == '.' && is_digit(src_[q + 1])) {
      q = digits(q + 1);
      is_float = true;
    }
    if (q < n && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < n && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < n && is_digit(src_[r])) {
        q = digits(r);
        is_float = true;
      }
    }
    std::string spelling;
    for (size_t k = p; k < q; ++k) {
      if (src_[k] != '_') spelling += src_[k];
    }
    Token tok;
    tok.offset = p;
    if (is_float) {
      tok.type = Tok::kFloat;
      tok.f = std::strtod(spelling.c_str(), nullptr);
      tokens_.push_back(tok);
      return q;
    }
    int base = 10;
    q = int_end;
    if (src_[p] == '0' && p + 1 < n && std::strchr("xXoObB", src_[p + 1]) != nullptr) {
      const char b = static_cast<char>(src_[p + 1] | 0x20);
      base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
      size_t r = p + 2;
      if (r < n && src_[r] == '_') ++r;
      q = digits(r, base);
      if (q == r) fail(p, "invalid integer literal");
      spelling.clear();
      for (size_t k = r; k < q; ++k) {
        if (src_[k] != '_') spelling += src_[k];
      }
    } else if (src_[p] == '0') {
      // "0(_?0)*": a decimal zero; "01" is two tokens in jinja2, rejected here.
      spelling = "0";
      q = p + 1;
      while (q < n && (src_[q] == '0' || (src_[q] == '_' && q + 1 < n && src_[q + 1] == '0'))) ++q;
    }
    errno = 0;
    tok.type = Tok::kInt;
    tok.i = static_cast<int64_t>(std::strtoull(spelling.c_str(), nullptr, base));
    if (errno == ERANGE || tok.i < 0) fail(p, "integer literal too large");
    tokens_.push_back(tok);
    return q;
  }


  // A quoted literal decoded like Python's "unicode-escape" codec (what jinja2 uses).
  size_t lex_string(size_t p) {
    const size_t n = src_.size();
    const char quote = src_[p];
    std::string out;
    size_t q = p + 1;
    while (true) {
      if (q >= n) fail(p, "unterminated string literal");
      const char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++q;
        continue;
      }
      if (q + 1 >= n) fail(p, "unterminated string literal");
      const char e = src_[q + 1];
      q += 2;
      const auto hex = [&](int count) {
        uint32_t v = 0;
        for (int k = 0; k < count; ++k, ++q) {
          const char h = q < n ? src_[q] : '\0';
          int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
          if (d < 0) fail(p, "truncated \\x/\\u escape in string literal");
          v = v * 16 + static_cast<uint32_t>(d);
        }
        return v;
      };
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': specula::utf8_append(hex(2), out); break;
        case 'u': specula::utf8_append(hex(4), out); break;
        case 'U': {
          const uint32_t v = hex(8);
          if (v > 0x10FFFF) fail(p, "illegal Unicode character in string literal");
          specula::utf8_append(v, out);
          break;
        }
        case 'N': fail(p, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && q < n && src_[q] >= '0' && src_[q] <= '7'; ++k, ++q) v = v * 8 + static_cast<uint32_t>(src_[q] - '0');
            specula::utf8_append(v, out);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    Token tok;
    tok.type = Tok::kString;
    tok.offset = p;
    tok.text = std::move(out);
    tokens_.push_back(std::move(tok));
    return q + 1;
  }

  std::string src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

// ---- parser ----

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::vector<size_t>& line_starts) : t_(std::move(tokens)), lines_(line_starts) {}

  std::unique_ptr<Template> run() {
    auto tpl = std::make_unique<Template>();
    std::string ended_by;
    parse_body(tpl->body, {}, &ended_by);
    return tpl;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxParseDepth) p.fail("template nested deeper than " + std::to_string(kMaxParseDepth) + " levels");
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }

  static std::string describe(const Token& tok) {
    switch (tok.type) {
      case Tok::kText: return "template text";
      case Tok::kVarBegin: return "'{{'";
      case Tok::kVarEnd: return "end of print statement";
      case Tok::kBlockBegin: return "'{%'";
      case Tok::kBlockEnd: return "end of statement block";
      case Tok::kName:
      case Tok::kOp: return "'" + tok.text + "'";
      case Tok::kString: return "string literal";
      case Tok::kInt: return "integer";
      case Tok::kFloat: return "float";
      case Tok::kEof: return "end of template";
    }
    return "?";
  }

  [[noreturn]] void fail_at(const Token& tok, const std::string& what) const {
    throw JinjaError(Lexer::location(lines_, tok.offset) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(cur(), what); }

  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail("expected a name, got " + describe(cur()));
    std::string s = cur().text;
    advance();
    return s;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail("expected end of statement block, got " + describe(cur()));
    advance();
  }

  template <typename T>
  void set_pos(T& x, const Token& at) const {
    const auto it = std::upper_bound(lines_.begin(), lines_.end(), at.offset) - 1;
    x.line = static_cast<int>(it - lines_.begin() + 1);
    x.col = static_cast<int>(at.offset - *it + 1);
  }

  ExprPtr make(ExprKind kind, const Token& at) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    set_pos(*e, at);
    return e;
  }
  // Adds a child and keeps the height bound (left-deep chains like 1+1+...+1 are built
  // by loops, not recursion, so the bound is checked here).
  void add(Expr& parent, ExprPtr child) const {
    if (child) {
      parent.height = std::max(parent.height, child->height + 1);
      if (parent.height > kMaxParseDepth) {
        throw JinjaError(std::to_string(parent.line) + ":" + std::to_string(parent.col) + ": expression nested deeper than " +
                         std::to_string(kMaxParseDepth) + " levels");
      }
    }
    parent.args.push_back(std::move(child));
  }
  ExprPtr binary(ExprKind kind, std::string op, ExprPtr a, ExprPtr b, const Token& at) {
    auto e = make(kind, at);
    e->name = std::move(op);
    add(*e, std::move(a));
    add(*e, std::move(b));
    return e;
  }

  // ---- statements ----

  // Whether a tree names the variable `loop` (conservatively, nested loops included).
  static bool mentions_loop(const Expr& e) {
    if (e.kind == ExprKind::kName && e.name == "loop") return true;
    for (const auto& a : e.args) {
      if (a && mentions_loop(*a)) return true;
    }
    for (const auto& kv : e.kwargs) {
      if (mentions_loop(*kv.second)) return true;
    }
    return false;
  }
  static bool mentions_loop(const Body& body) {
    for (const auto& n : body) {
      if ((n->expr && mentions_loop(*n->expr)) || (n->filter && mentions_loop(*n->filter)) ||
          mentions_loop(n->body) || mentions_loop(n->else_body)) {
        return true;
      }
      for (const auto& [cond, branch] : n->branches) {
        if ((cond && mentions_loop(*cond)) || mentions_loop(branch)) return true;
      }
      for (const auto& d : n->defaults) {
        if (d && mentions_loop(*d)) return true;
      }
    }
    return false;
  }

  // Parses nodes until one of `end_tags` opens a block (its name is consumed, the rest
  // of that tag is left to the caller) or the template ends.
  void parse_body(Body& body, const std::vector<std::string>& end_tags, std::string* ended_by) {
    DepthGuard guard(*this);
    while (true) {
      const Token& tok = cur();
      switch (tok.type) {
        case Tok::kText: {
          auto node = std::make_unique<Node>();
          node->kind = NodeKind::kText;
          set_pos(*node, tok);
          node->text = tok.text;
          body.push_back(std::move(node));
          advance();
          break;
        }
        case Tok::kVarBegin: {
          advance();
          auto node = std::make_unique<Node>();
          node->kind = NodeKind::kOutput;
          set_pos(*node, tok);
          node->expr = parse_tuple_expression();
          if (cur().type != Tok::kVarEnd) fail("expected end of print statement, got " + describe(cur()));
          advance();
          body.push_back(std::move(node));
          break;
        }
        case Tok::kBlockBegin: {
          advance();
          const Token& name_tok = cur();
          if (name_tok.type != Tok::kName) fail("expected a statement name, got " + describe(name_tok));
          if (std::find(end_tags.begin(), end_tags.end(), name_tok.text) != end_tags.end()) {
            *ended_by = name_tok.text;
            advance();
            return;
          }
          parse_statement(body);
          break;
        }
        case Tok::kEof: {
          if (!end_tags.empty()) {
            std::string want;
            for (const auto& e : end_tags) want += (want.empty() ? "'" : " or '") + e + "'";
            fail("unexpected end of template; expected " + want);
          }
          return;
        }
        default: fail("unexpected " + describe(tok));
      }
    }
  }

  void parse_statement(Body& body) {
    const Token& tok = cur();
    const std::string name = tok.text;
    auto node = std::make_unique<Node>();
    set_pos(*node, tok);
    advance();
    std::string ended_by;
    if (name == "if") {
      node->kind = NodeKind::kIf;
      ExprPtr cond = parse_expression(false);
      while (true) {
        expect_block_end();
        Body branch;
        parse_body(branch, {"elif", "else", "endif"}, &ended_by);
        node->branches.emplace_back(std::move(cond), std::move(branch));
        if (ended_by == "elif") {
          cond = parse_expression(false);
        } else if (ended_by == "else") {
          expect_block_end();
          Body else_branch;
          parse_body(else_branch, {"endif"}, &ended_by);
          node->branches.emplace_back(nullptr, std::move(else_branch));
          break;
        } else {
          break;
        }
      }
      expect_block_end();
    } else if (name == "for") {
      node->kind = NodeKind::kFor;
      const bool paren = skip_op("(");
      do {
        node->targets.push_back(expect_name());
      } while (skip_op(","));
      if (paren) expect_op(")");
      if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
      node->expr = parse_expression(false);
      if (skip_name("if")) node->filter = parse_expression(true);
      if (is_name("recursive")) fail("recursive for loops are not supported");
      expect_block_end();
      ++loop_depth_;
      parse_body(node->body, {"endfor", "else"}, &ended_by);
      --loop_depth_;
      if (ended_by == "else") {
        expect_block_end();
        parse_body(node->else_body, {"endfor"}, &ended_by);
      }
      expect_block_end();
      node->uses_loop = mentions_loop(node->body) || (node->filter && mentions_loop(*node->filter));
    } else if (name == "set") {
      node->targets.push_back(expect_name());
      if (skip_op(".")) {
        node->attr = expect_name();
      } else {
        while (skip_op(",")) node->targets.push_back(expect_name());
      }
      if (skip_op("=")) {
        node->kind = NodeKind::kSet;
        node->expr = parse_tuple_expression();
        expect_block_end();
      } else {
        if (node->targets.size() != 1 || !node->attr.empty()) fail("expected '=', got " + describe(cur()));
        node->kind = NodeKind::kSetBlock;
        expect_block_end();
        parse_body(node->body, {"endset"}, &ended_by);
        expect_block_end();
      }
    } else if (name == "macro") {
      node->kind = NodeKind::kMacro;
      node->targets.push_back(expect_name());
      expect_op("(");
      while (!skip_op(")")) {
        if (!node->params.empty()) expect_op(",");
        if (skip_op(")")) break;
        node->params.push_back(expect_name());
        node->defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
      }
      expect_block_end();
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;
      parse_body(node->body, {"endmacro"}, &ended_by);
      loop_depth_ = saved_loops;
      if (cur().type == Tok::kName && cur().text == node->targets[0]) advance();
      expect_block_end();
    } else if (name == "filter") {
      // {% filter f(args) | g %}body{% endfilter %}: the body's output through the filters.
      // The output reaches the filters as a variable no template can name.
      node->kind = NodeKind::kFilterBlock;
      ExprPtr e = make(ExprKind::kName, tok);
      e->name = kFilterBlockInput;
      const Token& name_tok = cur();
      node->expr = parse_filter_expr(parse_one_filter(std::move(e), name_tok));
      expect_block_end();
      parse_body(node->body, {"endfilter"}, &ended_by);
      expect_block_end();
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail_at(tok, "'" + name + "' outside of a for loop");
      node->kind = name == "break" ? NodeKind::kBreak : NodeKind::kContinue;
      expect_block_end();
    } else if (name == "generation") {
      // transformers' AssistantTracker block: renders its body unchanged.
      expect_block_end();
      parse_body(body, {"endgeneration"}, &ended_by);
      expect_block_end();
      return;
    } else {
      fail_at(tok, "unknown or unsupported tag '" + name + "'");
    }
    body.push_back(std::move(node));
  }

  // ---- expressions ----

  // `a, b` without brackets is a tuple (used by {{ }} and set).
  ExprPtr parse_tuple_expression() {
    const Token& at = cur();
    ExprPtr first = parse_expression(true);
    if (!is_op(",")) return first;
    auto list = make(ExprKind::kList, at);
    list->name = "tuple";
    add(*list, std::move(first));
    while (skip_op(",")) {
      if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd) break;
      add(*list, parse_expression(true));
    }
    return list;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const Token& at = cur();
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      auto c = make(ExprKind::kCond, at);
      ExprPtr cond = parse_or();
      ExprPtr other = skip_name("else") ? parse_condexpr() : nullptr;
      add(*c, std::move(e));
      add(*c, std::move(cond));
      add(*c, std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = cur();
      advance();
      e = binary(ExprKind::kBinary, "or", std::move(e), parse_and(), at);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = cur();
      advance();
      e = binary(ExprKind::kBinary, "and", std::move(e), parse_not(), at);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const Token& at = cur();
      advance();
      auto e = make(ExprKind::kUnary, at);
      e->name = "not";
      add(*e, parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, at);
        add(*cmp, std::move(first));
      }
      cmp->ops.push_back(op);
      add(*cmp, parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = cur();
      advance();
      e = binary(ExprKind::kBinary, at.text, std::move(e), parse_concat(), at);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& at = cur();
      advance();
      e = binary(ExprKind::kBinary, "~", std::move(e), parse_math2(), at);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = cur();
      advance();
      e = binary(ExprKind::kBinary, at.text, std::move(e), parse_pow(), at);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& at = cur();
      advance();
      e = binary(ExprKind::kBinary, "**", std::move(e), parse_unary(true), at);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& at = cur();
      advance();
      e = make(ExprKind::kUnary, at);
      e->name = at.text;
      add(*e, parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    switch (tok.type) {
      case Tok::kName: {
        advance();
        const std::string& n = tok.text;
        auto e = make(ExprKind::kLiteral, tok);
        if (n == "true" || n == "True") {
          e->literal = Value::boolean(true);
        } else if (n == "false" || n == "False") {
          e->literal = Value::boolean(false);
        } else if (n == "none" || n == "None") {
          e->literal = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = n;
        }
        return e;
      }
      case Tok::kString: {
        std::string s;
        while (cur().type == Tok::kString) {
          s += cur().text;
          advance();
        }
        auto e = make(ExprKind::kLiteral, tok);
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Tok::kInt:
      case Tok::kFloat: {
        advance();
        auto e = make(ExprKind::kLiteral, tok);
        e->literal = tok.type == Tok::kInt ? Value::integer(tok.i) : Value::number(tok.f);
        return e;
      }
      case Tok::kOp:
        if (tok.text == "(") {
          advance();
          if (skip_op(")")) {
            auto empty = make(ExprKind::kList, tok);
            empty->name = "tuple";
            return empty;
          }
          ExprPtr first = parse_expression(true);
          if (skip_op(")")) return first;
          auto list = make(ExprKind::kList, tok);
          list->name = "tuple";
          add(*list, std::move(first));
          while (skip_op(",")) {
            if (is_op(")")) break;
            add(*list, parse_expression(true));
          }
          expect_op(")");
          return list;
        }
        if (tok.text == "[") {
          advance();
          auto list = make(ExprKind::kList, tok);
          while (!skip_op("]")) {
            if (!list->args.empty()) {
              expect_op(",");
              if (skip_op("]")) break;
            }
            add(*list, parse_expression(true));
          }
          return list;
        }
        if (tok.text == "{") {
          advance();
          auto dict = make(ExprKind::kDict, tok);
          while (!skip_op("}")) {
            if (!dict->args.empty()) {
              expect_op(",");
              if (skip_op("}")) break;
            }
            add(*dict, parse_expression(true));
            expect_op(":");
            add(*dict, parse_expression(true));
          }
          return dict;
        }
        break;
      default: break;
    }
    fail("expected an expression, got " + describe(tok));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& at = cur();
      if (is_op(".")) {
        advance();
        if (cur().type == Tok::kName) {
          auto g = make(ExprKind::kGetAttr, at);
          g->name = cur().text;
          advance();
          add(*g, std::move(e));
          e = std::move(g);
        } else if (cur().type == Tok::kInt) {
          auto key = make(ExprKind::kLiteral, cur());
          key->literal = Value::integer(cur().i);
          advance();
          e = binary(ExprKind::kGetItem, "", std::move(e), std::move(key), at);
        } else {
          fail("expected an attribute name after '.', got " + describe(cur()));
        }
      } else if (is_op("[")) {
        advance();
        e = parse_subscript(std::move(e), at);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), ExprKind::kCall, "", at);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, const Token& at) {
    ExprPtr parts[3];
    int n_colons = 0;
    if (!is_op(":")) parts[0] = parse_expression(true);
    while (n_colons < 2 && skip_op(":")) {
      ++n_colons;
      if (!is_op(":") && !is_op("]")) parts[n_colons] = parse_expression(true);
    }
    expect_op("]");
    if (n_colons == 0) return binary(ExprKind::kGetItem, "", std::move(obj), std::move(parts[0]), at);
    auto s = make(ExprKind::kSlice, at);
    add(*s, std::move(obj));
    for (auto& p : parts) add(*s, std::move(p));
    return s;
  }

  // Call arguments for kCall (callee is args[0]) or a filter/test (value is args[0]).
  ExprPtr parse_call(ExprPtr first, ExprKind kind, std::string name, const Token& at) {
    auto c = make(kind, at);
    c->name = std::move(name);
    add(*c, std::move(first));
    expect_op("(");
    bool any = false;
    while (!skip_op(")")) {
      if (any) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      any = true;
      if (is_op("*") || is_op("**")) fail("*args / **kwargs in calls are not supported");
      if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        ExprPtr v = parse_expression(true);
        c->height = std::max(c->height, v->height + 1);
        c->kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!c->kwargs.empty()) fail("positional argument after keyword argument");
        add(*c, parse_expression(true));
      }
    }
    return c;
  }

  // One filter applied to `e`: its (dotted) name, then its arguments when a "(" follows;
  // `at` is where the node is reported.
  ExprPtr parse_one_filter(ExprPtr e, const Token& at) {
    const Token& name_tok = cur();
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    if (!is_known_filter(name)) fail_at(name_tok, "no filter named '" + name + "'");
    if (is_op("(")) return parse_call(std::move(e), ExprKind::kFilter, name, at);
    auto f = make(ExprKind::kFilter, at);
    f->name = name;
    add(*f, std::move(e));
    return f;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      const Token& at = cur();
      if (is_op("|")) {
        advance();
        e = parse_one_filter(std::move(e), at);
      } else if (is_name("is")) {
        advance();
        const bool negated = skip_name("not");
        const Token& name_tok = cur();
        std::string name = expect_name();
        while (skip_op(".")) name += "." + expect_name();
        if (!is_known_test(name)) fail_at(name_tok, "no test named '" + name + "'");
        ExprPtr t;
        const Token& nt = cur();
        if (is_op("(")) {
          t = parse_call(std::move(e), ExprKind::kTest, name, at);
        } else {
          t = make(ExprKind::kTest, at);
          t->name = name;
          add(*t, std::move(e));
          const bool starts_primary =
              nt.type == Tok::kName || nt.type == Tok::kString || nt.type == Tok::kInt || nt.type == Tok::kFloat ||
              (nt.type == Tok::kOp && (nt.text == "(" || nt.text == "[" || nt.text == "{"));
          if (starts_primary && !(nt.type == Tok::kName && (nt.text == "else" || nt.text == "or" || nt.text == "and"))) {
            if (nt.type == Tok::kName && nt.text == "is") fail("you cannot chain multiple tests with 'is'");
            add(*t, parse_postfix(parse_primary()));
          }
        }
        t->negated = negated;
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), ExprKind::kCall, "", at);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  const std::vector<size_t>& lines_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::unique_ptr<Template> parse_template(const std::string& source) {
  Lexer lexer(source);
  std::vector<Token> tokens = lexer.run();
  Parser parser(std::move(tokens), lexer.line_starts());
  return parser.run();
}

}  // namespace specula::jinja
