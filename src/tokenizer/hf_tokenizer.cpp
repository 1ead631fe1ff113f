// tokenizer/hf_tokenizer.cpp — tokenizer.json reader and pipeline (see hf_tokenizer.h).
// Semantics follow the `tokenizers` library's sources (normalizers/, pre_tokenizers/,
// models/bpe/{model,word}.rs, added_vocabulary.rs, decoders/, processors/) read for facts.
#include "tokenizer/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/utf8.h"
#include "formats/gguf.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/nfc_starters.h"
#include "tokenizer/unicode_additions.h"

namespace specula::tokenizer {
namespace {

using json = nlohmann::json;

// --- UTF-8 ------------------------------------------------------------------------------------
// Decodes the code point at s[i] (s valid UTF-8); sets *len.
uint32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<uint8_t>(s[i]);
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k]) & 0x3F); };
  if (c < 0x80) return *len = 1, c;
  if (c < 0xE0) return *len = 2, ((c & 0x1Fu) << 6) | b(1);
  if (c < 0xF0) return *len = 3, ((c & 0x0Fu) << 12) | (b(1) << 6) | b(2);
  return *len = 4, ((c & 0x07u) << 18) | (b(1) << 12) | (b(2) << 6) | b(3);
}

// Valid UTF-8 with every invalid byte replaced by U+FFFD (utf8proc's decoder decides).
std::string repair_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                                static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(s.substr(i, static_cast<size_t>(n)));
    i += static_cast<size_t>(n);
  }
  return out;
}

bool is_whitespace(uint32_t cp) {  // Unicode White_Space (Rust char::is_whitespace)
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_numeric(uint32_t cp) {  // Rust char::is_numeric: Nd, Nl, No
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(uint32_t cp) {
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || is_numeric(cp);
}

bool is_punctuation(uint32_t cp) {
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (cp < 0x80 && std::ispunct(static_cast<int>(cp))) || (c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO);
}

// --- patterns ----------------------------------------------------------------------------------
struct Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

using Spans = std::vector<std::pair<size_t, size_t>>;  // [begin, end)

struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;
  // (predicate patterns of the char-class pre-tokenizers)
  bool (*predicate)(uint32_t) = nullptr;

  // Non-overlapping matches, left to right.
  Spans find(std::string_view text) const {
    Spans out;
    if (predicate != nullptr) {
      for (size_t i = 0, len = 0; i < text.size(); i += len)
        if (predicate(decode_at(text, i, &len))) out.emplace_back(i, i + len);
      return out;
    }
    if (!regex) {
      if (literal.empty()) return out;
      for (size_t p = text.find(literal); p != std::string_view::npos; p = text.find(literal, p + literal.size()))
        out.emplace_back(p, p + literal.size());
      return out;
    }
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(pcre2_match_data_create(1, nullptr),
                                                                      pcre2_match_data_free);
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos <= text.size()) {
      int rc = pcre2_match(regex->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(regex->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      const size_t b = ov[0], e = ov[1];
      out.emplace_back(b, e);
      if (e > b) {
        pos = e;
      } else {  // an empty match: step one character
        if (b >= text.size()) break;
        size_t len = 0;
        decode_at(text, b, &len);
        pos = b + len;
      }
    }
    return out;
  }
};

// A tokenizer.json regex (Oniguruma syntax, Unicode 16) as PCRE2 10.42 (Unicode 14) should see
// it. Rewritten (everything else is copied as it is):
//   \p{X}, \P{X}, \p{^X} for a general category X (L, Lu, Ll, Lt, Lm, Lo, LC, M, Mn, ..., Cn;
//     the name matched loosely, as Oniguruma: case, ' ', '_', '-' ignored): Oniguruma's set,
//     PCRE2's \p{X} plus the code points added since Unicode 14.0 and minus those that left X
//     (unicode_additions.h: U+1171E went from Mn to Mc);
//   \d, \D: Oniguruma's \d is \p{Nd} (with its additions);
//   \w, \W: Oniguruma's word characters (letters, marks, Nd, Pc, Nl and some So; alone, not
//     in a class, also U+00B2, U+00B3, U+00B9, U+00BC-U+00BE; unicode_additions.h) — PCRE2
//     10.42's are \p{L}, \p{N} and '_';
//   \b, \B (outside classes): a boundary between Oniguruma's word and non-word characters;
//   \s, \S: Oniguruma's set, Unicode White_Space (PCRE2's lacks U+0085 and has U+180E);
//   \h, \H: Oniguruma's \h is a hex digit [0-9a-fA-F] (PCRE2's: horizontal space).
// Inside a character class a set that PCRE2 cannot list there (a negated set with additions,
// a set with removals) turns the whole class into an alternation: [A\P{X}] becomes
// (?:[A]|[^\p{X}adds]) and [^A\P{X}] becomes (?:(?![A]|[^\p{X}adds])(?s:.)).
// Not rewritten: scripts, binary properties and POSIX classes such as [[:alpha:]] (PCRE2's
// Unicode 14 data and definitions), a class under (?i) holding \p{Lu} / \p{Ll} / \p{Lt}
// (Oniguruma case-folds it, PCRE2 does not), nested classes and && (Oniguruma only).
constexpr const char* kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// A general category by its short name, matched loosely as Oniguruma does; or the set named
// exactly `name` ("\\w").
const UnicodeSetDelta* find_set(std::string_view name) {
  std::string key;
  for (char c : name)
    if (c != ' ' && c != '_' && c != '-') key.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  for (const UnicodeSetDelta& d : kUnicodeSetDeltas) {
    std::string n = d.name;
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (n == key) return &d;
  }
  return nullptr;
}

// A set as Oniguruma means it: `*expr` stands alone (a class or a group); `*item` is the same set
// as items of a character class, when PCRE2 can say it there (the return value).
struct SetSyntax {
  std::string item, expr;
  bool item_ok = false;
};

SetSyntax delta_set(const UnicodeSetDelta& d, bool negated) {
  const std::string p = d.pcre2, a = d.added, r = d.removed;
  // a single property: \p{X} stands alone and \P{X} is its complement, in a class too
  const bool single = p.rfind("\\p{", 0) == 0 && p.find('}') == p.size() - 1;
  SetSyntax s;
  if (!negated) {
    s.item = p + a;
    s.item_ok = r.empty();
    if (r.empty()) s.expr = single && a.empty() ? p : "[" + s.item + "]";
    else s.expr = "(?:(?![" + r + "])[" + p + "]" + (a.empty() ? "" : "|[" + a + "]") + ")";
  } else {
    s.item = single ? "\\P" + p.substr(2) : std::string();
    s.item_ok = single && a.empty() && r.empty();
    if (r.empty()) s.expr = s.item_ok ? s.item : "[^" + p + a + "]";
    else s.expr = "(?:[^" + p + a + "]|[" + r + "])";
  }
  return s;
}

SetSyntax plain_set(const std::string& items, bool negated) {
  SetSyntax s;
  s.item = items;
  s.item_ok = !negated;
  s.expr = std::string(negated ? "[^" : "[") + items + "]";
  return s;
}

// The escape at in[i] when it is one that needs rewriting (`in_class`: inside [...]); sets *len.
std::optional<SetSyntax> rewrite_escape(const std::string& in, size_t i, bool in_class, size_t* len) {
  if (in[i] != '\\' || i + 1 >= in.size()) return std::nullopt;
  const char e = in[i + 1];
  *len = 2;
  switch (e) {
    case 's': return plain_set(kWhiteSpace, false);
    case 'S': return plain_set(kWhiteSpace, true);
    case 'h': return plain_set("0-9a-fA-F", false);
    case 'H': return plain_set("0-9a-fA-F", true);
    case 'd': return delta_set(*find_set("Nd"), false);
    case 'D': return delta_set(*find_set("Nd"), true);
    case 'w': return delta_set(*find_set(in_class ? "[\\w]" : "\\w"), false);
    case 'W': return delta_set(*find_set(in_class ? "[\\w]" : "\\w"), true);
    default: break;
  }
  if ((e != 'p' && e != 'P') || i + 2 >= in.size() || in[i + 2] != '{') return std::nullopt;
  const size_t close = in.find('}', i + 3);
  if (close == std::string::npos) return std::nullopt;
  std::string_view name(in.data() + i + 3, close - i - 3);
  bool negated = e == 'P';
  if (!name.empty() && name[0] == '^') negated = !negated, name.remove_prefix(1);
  const UnicodeSetDelta* d = find_set(name);
  if (d == nullptr || !std::isalpha(static_cast<unsigned char>(d->name[0]))) return std::nullopt;
  *len = close + 1 - i;
  return delta_set(*d, negated);
}

// The character class starting at in[i] ('['), appended to *out; returns the index after it.
size_t rewrite_class(const std::string& in, size_t i, std::string* out) {
  size_t j = i + 1;
  const bool negated = j < in.size() && in[j] == '^';
  if (negated) ++j;
  std::string items;
  std::vector<std::string> extras;  // sets PCRE2 cannot list in a class
  if (j < in.size() && in[j] == ']') items += "\\]", ++j;  // a leading ']' is literal
  while (j < in.size() && in[j] != ']') {
    size_t len = 0;
    if (auto set = rewrite_escape(in, j, true, &len)) {
      if (set->item_ok) items += set->item;
      else extras.push_back(set->expr);
      j += len;
      continue;
    }
    if (in[j] == '\\' && j + 1 < in.size()) {
      items.append(in, j, 2);
      j += 2;
      continue;
    }
    if (in[j] == '[' && j + 1 < in.size() && in[j + 1] == ':') {  // POSIX [:name:]
      const size_t end = in.find(":]", j + 2);
      if (end != std::string::npos) {
        items.append(in, j, end + 2 - j);
        j = end + 2;
        continue;
      }
    }
    items += in[j++];
  }
  if (j >= in.size()) {  // unterminated: left for PCRE2 to report
    out->append(in, i, std::string::npos);
    return in.size();
  }
  ++j;
  if (!items.empty() && items[0] == '^') items.insert(0, 1, '\\');
  if (extras.empty()) {
    *out += std::string(negated ? "[^" : "[") + items + "]";
    return j;
  }
  std::string alts = items.empty() ? std::string() : "[" + items + "]";
  for (const std::string& x : extras) alts += (alts.empty() ? "" : "|") + x;
  *out += negated ? "(?:(?!" + alts + ")(?s:.))" : "(?:" + alts + ")";
  return j;
}

std::string to_pcre2(const std::string& in) {
  std::string out;
  out.reserve(in.size() + 64);
  for (size_t i = 0; i < in.size();) {
    size_t len = 0;
    if (auto set = rewrite_escape(in, i, false, &len)) {
      out += set->expr;
      i += len;
    } else if (in[i] == '\\' && i + 1 < in.size() && (in[i + 1] == 'b' || in[i + 1] == 'B')) {
      const std::string w = delta_set(*find_set("\\w"), false).expr;
      out += in[i + 1] == 'b' ? "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))"
                              : "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
      i += 2;
    } else if (in[i] == '\\' && i + 1 < in.size()) {
      out.append(in, i, 2);
      i += 2;
    } else if (in[i] == '[') {
      i = rewrite_class(in, i, &out);
    } else {
      out += in[i++];
    }
  }
  return out;
}

Result<std::shared_ptr<Regex>> compile(const std::string& hf_pattern, const std::string& where) {
  const std::string pattern = to_pcre2(hf_pattern);
  auto r = std::make_shared<Regex>();
  int err = 0;
  PCRE2_SIZE off = 0;
  r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                          &off, nullptr);
  if (r->code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return Status::error(where + ": regex error at " + std::to_string(off) + ": " + reinterpret_cast<const char*>(buf));
  }
  pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);
  return r;
}

// GPT-2's pre-tokenizer pattern (ByteLevel use_regex).
constexpr const char* kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// --- split behaviours -----------------------------------------------------------------------------
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Pieces of text cut at `matches` with the behaviour (tokenizers NormalizedString::split);
// empty pieces dropped.
Spans split_spans(size_t n, const Spans& matches, Behavior behavior, bool invert) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> parts;  // (span, is_match)
  if (n == 0) return {};
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) parts.push_back({{prev, b}, false});
    parts.push_back({{b, e}, true});
    prev = e;
  }
  if (prev != n) parts.push_back({{prev, n}, false});
  if (invert)
    for (auto& p : parts) p.second = !p.second;
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> acc;  // (span, removed)
  bool previous = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (auto& p : parts) acc.push_back({p.first, p.second});
      break;
    case Behavior::kIsolated:
      for (auto& p : parts) acc.push_back({p.first, false});
      break;
    case Behavior::kMergedWithPrevious:
      for (auto& p : parts) {
        if (p.second && !previous && !acc.empty()) acc.back().first.second = p.first.second;
        else acc.push_back({p.first, false});
        previous = p.second;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->second && !previous && !acc.empty()) acc.back().first.first = it->first.first;
        else acc.push_back({it->first, false});
        previous = it->second;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    case Behavior::kContiguous:
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0 && parts[i].second == previous) acc.back().first.second = parts[i].first.second;
        else acc.push_back({parts[i].first, false});
        previous = parts[i].second;
      }
      break;
  }
  Spans out;
  for (const auto& [span, removed] : acc)
    if (!removed && span.first < span.second) out.push_back(span);
  return out;
}

// --- normalizers -----------------------------------------------------------------------------------
struct Normalizer {
  enum class Kind { kSequence, kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kPrepend, kStrip, kStripAccents };
  Kind kind = Kind::kSequence;
  std::vector<Normalizer> seq;
  Pattern pattern;
  std::string content;
  bool left = false, right = false;
};

std::string utf8proc_transform_run(const std::string& s, int options) {
  // (utf8proc_map allocates even for an empty text: asking it then leaked that buffer on every
  // empty run — two starters in a row — found by fuzz/tokenize_fuzz.cpp)
  if (s.empty()) return s;
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &dst,
                                          static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  std::string out = n < 0 || dst == nullptr ? s  // input was repaired to valid UTF-8; not reached
                                            : std::string(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return out;
}

// utf8proc's normalization, except that the code points the library's tables treat as starters
// (nfc_starters.h) split the text: nothing reorders or composes across them.
std::string utf8proc_transform(const std::string& s, int options) {
  std::string out, run;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const uint32_t cp = decode_at(s, i, &len);
    if (cp >= 0x7FD && std::binary_search(std::begin(kNormalizerStarters), std::end(kNormalizerStarters), cp)) {
      out += utf8proc_transform_run(run, options);
      run.clear();
      out.append(s, i, len);
    } else {
      run.append(s, i, len);
    }
  }
  return out + utf8proc_transform_run(run, options);
}

std::string normalize(const Normalizer& nm, std::string s) {
  switch (nm.kind) {
    case Normalizer::Kind::kSequence:
      for (const Normalizer& n : nm.seq) s = normalize(n, std::move(s));
      return s;
    case Normalizer::Kind::kNfc:
      return utf8proc_transform(s, UTF8PROC_COMPOSE);
    case Normalizer::Kind::kNfd:
      return utf8proc_transform(s, UTF8PROC_DECOMPOSE);
    case Normalizer::Kind::kNfkc:
      return utf8proc_transform(s, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case Normalizer::Kind::kNfkd:
      return utf8proc_transform(s, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    case Normalizer::Kind::kLowercase: {
      std::string out;
      for (size_t i = 0, len = 0; i < s.size(); i += len)
        utf8_append(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(decode_at(s, i, &len)))), out);
      return out;
    }
    case Normalizer::Kind::kReplace: {
      std::string out;
      size_t prev = 0;
      for (const auto& [b, e] : nm.pattern.find(s)) {
        out.append(s, prev, b - prev);
        out += nm.content;
        prev = e;
      }
      out.append(s, prev, std::string::npos);
      return out;
    }
    case Normalizer::Kind::kPrepend:
      return s.empty() ? s : nm.content + s;
    case Normalizer::Kind::kStrip: {
      size_t b = 0, e = s.size(), len = 0;
      if (nm.left)
        while (b < e && is_whitespace(decode_at(s, b, &len))) b += len;
      if (nm.right)
        while (e > b) {
          size_t k = e - 1;
          while (k > b && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
          if (!is_whitespace(decode_at(s, k, &len))) break;
          e = k;
        }
      return s.substr(b, e - b);
    }
    case Normalizer::Kind::kStripAccents: {
      std::string out;
      for (size_t i = 0, len = 0; i < s.size(); i += len) {
        const uint32_t cp = decode_at(s, i, &len);
        if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_MN) out.append(s, i, len);
      }
      return out;
    }
  }
  return s;
}

// --- pre-tokenizers --------------------------------------------------------------------------------
struct Piece {
  std::string text;
  bool at_origin = false;  // starts at offset 0 of the original input (Metaspace "first")
};

struct PreTokenizer {
  enum class Kind { kSequence, kSplit, kByteLevel, kDigits, kMetaspace, kWhitespace, kWhitespaceSplit, kPunctuation };
  Kind kind = Kind::kSequence;
  std::vector<PreTokenizer> seq;
  Pattern pattern;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;
  std::string replacement;  // Metaspace
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool split = true;
};

void split_pieces(std::vector<Piece>& pieces, const Pattern& p, Behavior behavior, bool invert) {
  std::vector<Piece> out;
  for (Piece& pc : pieces) {
    for (const auto& [b, e] : split_spans(pc.text.size(), p.find(pc.text), behavior, invert))
      out.push_back(Piece{pc.text.substr(b, e - b), pc.at_origin && b == 0});
  }
  pieces.swap(out);
}

void pre_tokenize(const PreTokenizer& pt, std::vector<Piece>& pieces) {
  using K = PreTokenizer::Kind;
  switch (pt.kind) {
    case K::kSequence:
      for (const PreTokenizer& p : pt.seq) pre_tokenize(p, pieces);
      return;
    case K::kSplit:
    case K::kDigits:
    case K::kWhitespace:
    case K::kWhitespaceSplit:
    case K::kPunctuation:
      split_pieces(pieces, pt.pattern, pt.behavior, pt.invert);
      return;
    case K::kByteLevel: {
      if (pt.add_prefix_space)
        for (Piece& pc : pieces)
          if (pc.text.empty() || pc.text[0] != ' ') pc.text.insert(0, 1, ' ');
      if (pt.pattern.regex) split_pieces(pieces, pt.pattern, Behavior::kIsolated, false);
      const ByteAlphabet& a = alphabet();
      for (Piece& pc : pieces) {
        std::string mapped;
        mapped.reserve(pc.text.size() * 2);
        for (char c : pc.text) utf8_append(a.to_cp[static_cast<uint8_t>(c)], mapped);
        pc.text.swap(mapped);
      }
      return;
    }
    case K::kMetaspace: {
      for (Piece& pc : pieces) {
        std::string r;
        for (char c : pc.text) {
          if (c == ' ') r += pt.replacement;
          else r += c;
        }
        const bool starts = r.rfind(pt.replacement, 0) == 0;
        if (!starts && (pt.prepend == PreTokenizer::Prepend::kAlways ||
                        (pt.prepend == PreTokenizer::Prepend::kFirst && pc.at_origin)))
          r.insert(0, pt.replacement);
        pc.text.swap(r);
      }
      if (pt.split) {
        Pattern p;
        p.literal = pt.replacement;
        split_pieces(pieces, p, Behavior::kMergedWithNext, false);
      }
      return;
    }
  }
}

// --- the model: BPE ---------------------------------------------------------------------------------
struct Merge {
  int32_t rank;
  int32_t merged;
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Decoder {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind;
  std::string pattern, content;  // Replace; Metaspace replacement in `pattern`
  int64_t start = 0;             // Strip
};

}  // namespace

// Hashing that finds std::string keys by std::string_view (no temporary strings).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TextIds = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct HfTokenizer::Impl {
  TextIds model_vocab;
  std::unordered_map<uint64_t, Merge> merges;
  int32_t unk_id = -1;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  int32_t byte_token[256];

  Normalizer normalizer;
  bool has_normalizer = false;
  PreTokenizer pre;
  bool has_pre = false;

  // Added tokens: byte tries (leftmost-longest scan) over raw and normalized contents.
  struct Added {
    int32_t id;
    bool special, single_word, lstrip, rstrip;
  };
  std::vector<Added> added;
  struct Trie {
    struct Node {
      std::map<uint8_t, int32_t> next;
      int32_t added = -1;  // index into `added`
    };
    std::vector<Node> nodes{Node{}};
    void insert(std::string_view s, int32_t index) {
      int32_t n = 0;
      for (char c : s) {
        auto it = nodes[n].next.find(static_cast<uint8_t>(c));
        if (it == nodes[n].next.end()) {
          nodes.push_back(Node{});
          const auto id = static_cast<int32_t>(nodes.size() - 1);
          nodes[n].next.emplace(static_cast<uint8_t>(c), id);
          n = id;
        } else {
          n = it->second;
        }
      }
      if (nodes[n].added < 0) nodes[n].added = index;
    }
    bool empty() const { return nodes.size() == 1; }
  };
  Trie raw_trie, normalized_trie;

  std::vector<Decoder> decoders;
  bool strip_first_space = false;

  // Splits `text` into (added index or -1, span) by the trie (AddedVocabulary::find_matches).
  std::vector<std::pair<int32_t, std::pair<size_t, size_t>>> find_added(std::string_view text, const Trie& trie,
                                                                          bool parse_special) const;
  void encode_model(const std::string& word, std::vector<int32_t>* out) const;
  void encode_text(const std::string& text, bool at_origin, std::vector<int32_t>* out) const;
};

HfTokenizer::HfTokenizer(Vocab vocab, std::unique_ptr<Impl> impl) : Tokenizer(std::move(vocab)), impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

namespace {

size_t space_left(std::string_view s, size_t end) {  // start of the whitespace run ending at `end`
  while (end > 0) {
    size_t k = end - 1;
    while (k > 0 && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
    size_t len = 0;
    if (!is_whitespace(decode_at(s, k, &len))) break;
    end = k;
  }
  return end;
}

size_t space_right(std::string_view s, size_t begin) {
  size_t len = 0;
  while (begin < s.size() && is_whitespace(decode_at(s, begin, &len))) begin += len;
  return begin;
}

bool word_char_before(std::string_view s, size_t end) {
  if (end == 0) return false;
  size_t k = end - 1, len = 0;
  while (k > 0 && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
  const uint32_t cp = decode_at(s, k, &len);
  return is_alphanumeric(cp) || cp == '_';
}

bool word_char_at(std::string_view s, size_t begin) {
  if (begin >= s.size()) return false;
  size_t len = 0;
  const uint32_t cp = decode_at(s, begin, &len);
  return is_alphanumeric(cp) || cp == '_';
}

}  // namespace

std::vector<std::pair<int32_t, std::pair<size_t, size_t>>> HfTokenizer::Impl::find_added(std::string_view text,
                                                                                         const Trie& trie,
                                                                                         bool parse_special) const {
  std::vector<std::pair<int32_t, std::pair<size_t, size_t>>> out;
  size_t emitted = 0;  // end of the last split
  size_t p = 0;
  while (!trie.empty() && p < text.size()) {
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t q = p; q < text.size(); ++q) {
      auto it = trie.nodes[node].next.find(static_cast<uint8_t>(text[q]));
      if (it == trie.nodes[node].next.end()) break;
      node = it->second;
      if (trie.nodes[node].added >= 0) best = trie.nodes[node].added, best_end = q + 1;
    }
    if (best < 0) {
      ++p;
      continue;
    }
    const Added& a = added[best];
    size_t start = p, stop = best_end;
    p = best_end;  // a skipped match still consumes its text (the scan is non-overlapping)
    if (a.special && !parse_special) continue;
    if (a.single_word && (word_char_before(text, start) || word_char_at(text, stop))) continue;
    if (a.lstrip) start = std::max(space_left(text, start), emitted);
    if (a.rstrip) stop = space_right(text, stop);
    if (emitted < start) out.push_back({-1, {emitted, start}});
    out.push_back({a.id, {start, stop}});
    emitted = stop;
    p = std::max(p, stop);
  }
  if (emitted < text.size()) out.push_back({-1, {emitted, text.size()}});
  return out;
}

void HfTokenizer::Impl::encode_model(const std::string& word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (auto it = model_vocab.find(word); it != model_vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  int32_t unk_pending = -1;  // fused unk run
  const auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back(Symbol{id, n - 1, n + 1, true});
  };
  for (size_t i = 0, len = 0; i < word.size(); i += len) {
    decode_at(word, i, &len);
    if (auto it = model_vocab.find(std::string_view(word).substr(i, len)); it != model_vocab.end()) {
      if (unk_pending >= 0) add(unk_pending), unk_pending = -1;
      add(it->second);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (size_t k = 0; k < len; ++k) all = all && byte_token[static_cast<uint8_t>(word[i + k])] >= 0;
      if (all) {
        for (size_t k = 0; k < len; ++k) add(byte_token[static_cast<uint8_t>(word[i + k])]);
        continue;
      }
    }
    if (unk_id >= 0) {
      if (unk_pending >= 0 && !fuse_unk) add(unk_pending);
      unk_pending = unk_id;
    }
  }
  if (unk_pending >= 0) add(unk_pending);
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Entry {
    int32_t rank, pos, merged;
  };
  const auto after = [](const Entry& a, const Entry& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  std::priority_queue<Entry, std::vector<Entry>, decltype(after)> queue(after);
  const auto lookup = [&](int32_t l, int32_t r) -> const Merge* {
    auto it = merges.find(pair_key(l, r));
    return it == merges.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i)
    if (const Merge* m = lookup(sym[i].id, sym[i + 1].id)) queue.push(Entry{m->rank, static_cast<int32_t>(i), m->merged});
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    const Merge* now = lookup(left.id, right.id);
    if (now == nullptr || now->merged != top.merged) continue;
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (left.prev >= 0)
      if (const Merge* m = lookup(sym[left.prev].id, left.id)) queue.push(Entry{m->rank, left.prev, m->merged});
    if (left.next >= 0)
      if (const Merge* m = lookup(left.id, sym[left.next].id)) queue.push(Entry{m->rank, top.pos, m->merged});
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

void HfTokenizer::Impl::encode_text(const std::string& text, bool at_origin, std::vector<int32_t>* out) const {
  std::vector<Piece> pieces{Piece{text, at_origin}};
  if (has_pre) pre_tokenize(pre, pieces);
  for (const Piece& p : pieces) encode_model(p.text, out);
}

void HfTokenizer::encode_piece(std::string_view part, bool parse_special, bool* at_start,
                               std::vector<int32_t>* out) const {
  std::string repaired;
  if (!utf8_valid(part)) {
    repaired = repair_utf8(part);
    part = repaired;
  }
  const Impl& im = *impl_;
  for (const auto& [id, span] : im.find_added(part, im.raw_trie, parse_special)) {
    const bool origin = *at_start && span.first == 0;
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    std::string text(part.substr(span.first, span.second - span.first));
    if (im.has_normalizer) text = normalize(im.normalizer, std::move(text));
    for (const auto& [nid, nspan] : im.find_added(text, im.normalized_trie, parse_special)) {
      if (nid >= 0) out->push_back(nid);
      else im.encode_text(text.substr(nspan.first, nspan.second - nspan.first), origin && nspan.first == 0, out);
    }
  }
  if (!part.empty()) *at_start = false;
}

void HfTokenizer::encode_fragment(std::string_view fragment, bool first_after_special, std::vector<int32_t>* out) const {
  bool at_start = first_after_special;
  encode_piece(fragment, true, &at_start, out);
}

std::string HfTokenizer::token_to_piece(int32_t id, bool render_special) const {
  SPECULA_CHECK(vocab_.valid_id(id));
  const TokenType type = vocab_.type(id);
  if ((type == TokenType::kControl || type == TokenType::kUnknown) && !render_special) return std::string();
  if (type == TokenType::kUnused || type == TokenType::kUndefined) return std::string();
  std::string t = vocab_.text(id);
  for (const Decoder& d : impl_->decoders) {
    switch (d.kind) {
      case Decoder::Kind::kReplace:
      case Decoder::Kind::kMetaspace: {
        const std::string& from = d.pattern;
        const std::string& to = d.kind == Decoder::Kind::kReplace ? d.content : std::string(" ");
        if (from.empty()) break;
        std::string r;
        size_t prev = 0;
        for (size_t p = t.find(from); p != std::string::npos; p = t.find(from, p + from.size())) {
          r.append(t, prev, p - prev);
          r += to;
          prev = p + from.size();
        }
        r.append(t, prev, std::string::npos);
        t.swap(r);
        break;
      }
      case Decoder::Kind::kByteFallback:
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<uint8_t>(t[3])) &&
            std::isxdigit(static_cast<uint8_t>(t[4])))
          t = std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
        break;
      case Decoder::Kind::kByteLevel: {  // all characters in the alphabet, or the text as it is
        std::string bytes;
        bool all = true;
        for (size_t i = 0; all && i < t.size();) {
          utf8proc_int32_t cp = 0;
          const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(t.data() + i),
                                                      static_cast<utf8proc_ssize_t>(t.size() - i), &cp);
          const auto ucp = static_cast<uint32_t>(cp);
          all = n > 0 && ucp < alphabet().to_byte.size() && alphabet().to_byte[ucp] >= 0;
          if (all) bytes += static_cast<char>(alphabet().to_byte[ucp]);
          i += n > 0 ? static_cast<size_t>(n) : 1;
        }
        if (all) t.swap(bytes);
        break;
      }
      case Decoder::Kind::kStrip: {  // per token (a Strip before any Fuse)
        for (int64_t k = 0; k < d.start && !t.empty() && t.compare(0, d.content.size(), d.content) == 0; ++k)
          t.erase(0, d.content.size());
        break;
      }
      case Decoder::Kind::kFuse:
        break;
    }
  }
  return t;
}

bool HfTokenizer::strip_leading_space() const { return impl_->strip_first_space; }

Result<std::string> HfTokenizer::decode(std::span<const int32_t> ids, bool remove_special, bool render_special) const {
  const bool byte_fallback = std::any_of(impl_->decoders.begin(), impl_->decoders.end(),
                                         [](const Decoder& d) { return d.kind == Decoder::Kind::kByteFallback; });
  const bool byte_level = std::any_of(impl_->decoders.begin(), impl_->decoders.end(),
                                      [](const Decoder& d) { return d.kind == Decoder::Kind::kByteLevel; });
  if (!byte_fallback && !byte_level) return Tokenizer::decode(ids, remove_special, render_special);
  for (size_t i = 0; i < ids.size(); ++i)
    if (!vocab_.valid_id(ids[i]))
      return Status::error("[tokenizer] id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                           " out of range (vocab size " + std::to_string(vocab_.size()) + ")");
  if (remove_special && vocab_.add_bos() && !ids.empty() && ids.front() == vocab_.bos_id()) ids = ids.subspan(1);
  if (remove_special && vocab_.add_eos() && !ids.empty() && ids.back() == vocab_.eos_id())
    ids = ids.subspan(0, ids.size() - 1);
  std::string out, run;
  size_t run_tokens = 0;
  const auto flush = [&] {
    if (run_tokens == 0) return;
    if (utf8_valid(run)) {
      out += run;
    } else {
      for (size_t k = 0; k < run_tokens; ++k) out += "\xEF\xBF\xBD";
    }
    run.clear();
    run_tokens = 0;
  };
  bool first = true;
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (first && strip_leading_space() && !piece.empty() && piece.front() == ' ') piece.erase(0, 1);
    first = false;
    if (byte_fallback && vocab_.is_byte(id)) {
      run += piece;
      ++run_tokens;
      continue;
    }
    flush();
    out += piece;
  }
  flush();
  if (!byte_level) return out;
  std::string lossy;
  const size_t pending = StreamingDetokenizer::append_valid_utf8(out, &lossy);
  if (pending > 0) lossy += "\xEF\xBF\xBD";
  return lossy;
}

// --- tokenizer.json reader --------------------------------------------------------------------------
namespace {

struct Reader {
  std::string origin;
  Status err = Status::ok();
  void fail(const std::string& path, const std::string& msg) {
    if (err.is_ok()) err = Status::error("[tokenizer.json] " + origin + ": " + path + ": " + msg);
  }
  std::string str(const json& j, const char* key, const std::string& path, const std::string& fallback = "") {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_string()) {
      fail(path + "." + key, "must be a string");
      return fallback;
    }
    return it->get<std::string>();
  }
  bool boolean(const json& j, const char* key, const std::string& path, bool fallback) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) {
      fail(path + "." + key, "must be a boolean");
      return fallback;
    }
    return it->get<bool>();
  }
  Pattern pattern(const json& j, const std::string& path) {
    Pattern p;
    auto it = j.find("pattern");
    if (it == j.end() || !it->is_object() || it->size() != 1) {
      fail(path + ".pattern", "must be {\"String\": ...} or {\"Regex\": ...}");
      return p;
    }
    if (it->contains("String") && (*it)["String"].is_string()) {
      p.literal = (*it)["String"].get<std::string>();
    } else if (it->contains("Regex") && (*it)["Regex"].is_string()) {
      auto r = compile((*it)["Regex"].get<std::string>(), "[tokenizer.json] " + origin + ": " + path + ".pattern");
      if (!r) {
        if (err.is_ok()) err = r.status();
      } else {
        p.regex = *r;
      }
    } else {
      fail(path + ".pattern", "must be {\"String\": ...} or {\"Regex\": ...}");
    }
    return p;
  }
  std::string type(const json& j, const std::string& path) {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
      fail(path, "must be an object with a string \"type\"");
      return "";
    }
    return j["type"].get<std::string>();
  }

  Normalizer normalizer(const json& j, const std::string& path) {
    Normalizer n;
    const std::string t = type(j, path);
    using K = Normalizer::Kind;
    if (t == "Sequence") {
      n.kind = K::kSequence;
      const json* list = j.contains("normalizers") ? &j["normalizers"] : nullptr;
      if (list == nullptr || !list->is_array()) fail(path + ".normalizers", "must be a list");
      else
        for (size_t i = 0; i < list->size(); ++i) n.seq.push_back(normalizer((*list)[i], path + ".normalizers[" + std::to_string(i) + "]"));
    } else if (t == "NFC") {
      n.kind = K::kNfc;
    } else if (t == "NFD") {
      n.kind = K::kNfd;
    } else if (t == "NFKC") {
      n.kind = K::kNfkc;
    } else if (t == "NFKD") {
      n.kind = K::kNfkd;
    } else if (t == "Lowercase") {
      n.kind = K::kLowercase;
    } else if (t == "Replace") {
      n.kind = K::kReplace;
      n.pattern = pattern(j, path);
      n.content = str(j, "content", path);
    } else if (t == "Prepend") {
      n.kind = K::kPrepend;
      n.content = str(j, "prepend", path);
    } else if (t == "Strip") {
      n.kind = K::kStrip;
      n.left = boolean(j, "strip_left", path, false);
      n.right = boolean(j, "strip_right", path, false);
    } else if (t == "StripAccents") {
      n.kind = K::kStripAccents;
    } else if (!t.empty()) {
      fail(path + ".type", "normalizer '" + t +
                               "' is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Replace, "
                               "Prepend, Strip, StripAccents)");
    }
    return n;
  }

  Behavior behavior(const json& j, const std::string& path) {
    const std::string b = str(j, "behavior", path, "Isolated");
    if (b == "Removed") return Behavior::kRemoved;
    if (b == "Isolated") return Behavior::kIsolated;
    if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
    if (b == "MergedWithNext") return Behavior::kMergedWithNext;
    if (b == "Contiguous") return Behavior::kContiguous;
    fail(path + ".behavior", "unknown behavior '" + b + "'");
    return Behavior::kIsolated;
  }

  PreTokenizer pre_tokenizer(const json& j, const std::string& path) {
    PreTokenizer p;
    const std::string t = type(j, path);
    using K = PreTokenizer::Kind;
    if (t == "Sequence") {
      p.kind = K::kSequence;
      const json* list = j.contains("pretokenizers") ? &j["pretokenizers"] : nullptr;
      if (list == nullptr || !list->is_array()) fail(path + ".pretokenizers", "must be a list");
      else
        for (size_t i = 0; i < list->size(); ++i)
          p.seq.push_back(pre_tokenizer((*list)[i], path + ".pretokenizers[" + std::to_string(i) + "]"));
    } else if (t == "Split") {
      p.kind = K::kSplit;
      p.pattern = pattern(j, path);
      p.behavior = behavior(j, path);
      p.invert = boolean(j, "invert", path, false);
    } else if (t == "ByteLevel") {
      p.kind = K::kByteLevel;
      p.add_prefix_space = boolean(j, "add_prefix_space", path, true);
      if (boolean(j, "use_regex", path, true)) {
        auto r = compile(kGpt2Pattern, "[tokenizer.json] " + origin + ": " + path);
        if (r) p.pattern.regex = *r;
      }
    } else if (t == "Digits") {
      p.kind = K::kDigits;
      p.pattern.predicate = &is_numeric;
      p.behavior = boolean(j, "individual_digits", path, false) ? Behavior::kIsolated : Behavior::kContiguous;
    } else if (t == "Metaspace") {
      p.kind = K::kMetaspace;
      p.replacement = str(j, "replacement", path, "\xE2\x96\x81");
      const std::string scheme = str(j, "prepend_scheme", path, boolean(j, "add_prefix_space", path, true) ? "always" : "never");
      if (scheme == "always") p.prepend = PreTokenizer::Prepend::kAlways;
      else if (scheme == "first") p.prepend = PreTokenizer::Prepend::kFirst;
      else if (scheme == "never") p.prepend = PreTokenizer::Prepend::kNever;
      else fail(path + ".prepend_scheme", "unknown scheme '" + scheme + "'");
      p.split = boolean(j, "split", path, true);
    } else if (t == "Whitespace") {
      p.kind = K::kWhitespace;
      auto r = compile("\\w+|[^\\w\\s]+", "[tokenizer.json] " + origin + ": " + path);
      if (r) p.pattern.regex = *r;
      p.behavior = Behavior::kRemoved;
      p.invert = true;
    } else if (t == "WhitespaceSplit") {
      p.kind = K::kWhitespaceSplit;
      p.pattern.predicate = &is_whitespace;
      p.behavior = Behavior::kRemoved;
    } else if (t == "Punctuation") {
      p.kind = K::kPunctuation;
      p.pattern.predicate = &is_punctuation;
      p.behavior = behavior(j, path);
    } else if (!t.empty()) {
      fail(path + ".type", "pre-tokenizer '" + t +
                               "' is not supported (supported: Sequence, Split, ByteLevel, Digits, Metaspace, "
                               "Whitespace, WhitespaceSplit, Punctuation)");
    }
    return p;
  }

  void decoder(const json& j, const std::string& path, std::vector<Decoder>& out, bool* fused, bool* strip_first) {
    const std::string t = type(j, path);
    if (t == "Sequence") {
      const json* list = j.contains("decoders") ? &j["decoders"] : nullptr;
      if (list == nullptr || !list->is_array()) fail(path + ".decoders", "must be a list");
      else
        for (size_t i = 0; i < list->size(); ++i) decoder((*list)[i], path + ".decoders[" + std::to_string(i) + "]", out, fused, strip_first);
    } else if (t == "ByteLevel") {
      out.push_back(Decoder{Decoder::Kind::kByteLevel, "", "", 0});
    } else if (t == "Replace") {
      Pattern p = pattern(j, path);
      if (p.regex) fail(path + ".pattern", "a Regex pattern is not supported in a Replace decoder");
      out.push_back(Decoder{Decoder::Kind::kReplace, p.literal, str(j, "content", path), 0});
    } else if (t == "ByteFallback") {
      out.push_back(Decoder{Decoder::Kind::kByteFallback, "", "", 0});
    } else if (t == "Fuse") {
      *fused = true;
    } else if (t == "Strip") {
      const std::string content = str(j, "content", path, " ");
      const int64_t start = j.value("start", 0), stop = j.value("stop", 0);
      if (stop != 0) fail(path + ".stop", "only 0 is supported");
      if (*fused) {
        if (content != " " || start > 1) fail(path, "after Fuse only Strip of one leading ' ' is supported");
        else if (start == 1) *strip_first = true;
      } else {
        out.push_back(Decoder{Decoder::Kind::kStrip, "", content, start});
      }
    } else if (t == "Metaspace") {
      const std::string rep = str(j, "replacement", path, "\xE2\x96\x81");
      const std::string scheme = str(j, "prepend_scheme", path, boolean(j, "add_prefix_space", path, true) ? "always" : "never");
      out.push_back(Decoder{Decoder::Kind::kMetaspace, rep, " ", 0});
      if (scheme != "never") *strip_first = true;
    } else if (!t.empty()) {
      fail(path + ".type", "decoder '" + t +
                               "' is not supported (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, "
                               "Metaspace)");
    }
  }

  // TemplateProcessing "single": special ids before / after $A.
  void processor(const json& j, const std::string& path, const std::function<int32_t(const std::string&)>& id_of_text,
                 std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
    const std::string t = type(j, path);
    const auto id_of = [&](const std::string& tok, const std::string& p) -> int32_t {
      const int32_t id = id_of_text(tok);
      if (id < 0) fail(p, "unknown token '" + tok + "'");
      return id;
    };
    if (t == "Sequence") {
      const json* list = j.contains("processors") ? &j["processors"] : nullptr;
      if (list == nullptr || !list->is_array()) fail(path + ".processors", "must be a list");
      else
        for (size_t i = 0; i < list->size(); ++i) processor((*list)[i], path + ".processors[" + std::to_string(i) + "]", id_of_text, prefix, suffix);
    } else if (t == "ByteLevel") {
      // offsets only
    } else if (t == "TemplateProcessing") {
      auto single = j.find("single");
      if (single == j.end() || !single->is_array()) {
        fail(path + ".single", "must be a list");
        return;
      }
      auto specials = j.find("special_tokens");
      bool seen_a = false;
      for (size_t i = 0; i < single->size(); ++i) {
        const json& e = (*single)[i];
        const std::string ep = path + ".single[" + std::to_string(i) + "]";
        if (e.contains("Sequence")) {
          seen_a = true;
        } else if (e.contains("SpecialToken") && e["SpecialToken"].contains("id") && e["SpecialToken"]["id"].is_string()) {
          const std::string name = e["SpecialToken"]["id"].get<std::string>();
          std::vector<int32_t> tids;
          if (specials != j.end() && specials->is_object() && specials->contains(name) &&
              (*specials)[name].contains("ids") && (*specials)[name]["ids"].is_array()) {
            for (const json& x : (*specials)[name]["ids"])
              if (x.is_number_integer()) tids.push_back(x.get<int32_t>());
          } else {
            tids.push_back(id_of(name, ep));
          }
          (seen_a ? suffix : prefix).insert((seen_a ? suffix : prefix).end(), tids.begin(), tids.end());
        } else {
          fail(ep, "must be {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
        }
      }
    } else if (t == "RobertaProcessing" || t == "BertProcessing") {
      for (const char* k : {"cls", "sep"}) {
        auto it = j.find(k);
        if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
          fail(path + "." + k, "must be [token, id]");
          return;
        }
        (k[0] == 'c' ? prefix : suffix).push_back((*it)[1].get<int32_t>());
      }
    } else if (!t.empty()) {
      fail(path + ".type", "post-processor '" + t +
                               "' is not supported (supported: TemplateProcessing, ByteLevel, RobertaProcessing, "
                               "BertProcessing, Sequence)");
    }
  }
};

}  // namespace

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::create(std::string_view json_text, const Options& options) {
  Reader rd;
  rd.origin = options.origin;
  const std::string where = "[tokenizer.json] " + options.origin + ": ";
  json j = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (j.is_discarded()) return Status::error(where + "not valid JSON");
  if (!j.is_object()) return Status::error(where + "not a JSON object");
  auto impl = std::make_unique<Impl>();
  std::fill(std::begin(impl->byte_token), std::end(impl->byte_token), -1);

  // model
  auto mit = j.find("model");
  if (mit == j.end() || !mit->is_object()) return Status::error(where + "model: missing (an object)");
  const json& m = *mit;
  const std::string mtype = m.contains("type") && m["type"].is_string() ? m["type"].get<std::string>() : "BPE";
  if (mtype != "BPE") return Status::error(where + "model.type '" + mtype + "' is not supported (supported: BPE)");
  if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
    return Status::error(where + "model.dropout: BPE dropout is not supported (encoding must be deterministic)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
      return Status::error(where + "model." + k + " is not supported (only null or \"\")");
  auto vit = m.find("vocab");
  if (vit == m.end() || !vit->is_object() || vit->empty()) return Status::error(where + "model.vocab: missing or empty (an object)");
  int32_t max_id = -1;
  impl->model_vocab.reserve(vit->size());
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() >= (int64_t{1} << 24))
      return Status::error(where + "model.vocab['" + it.key().substr(0, 64) + "']: id must be an integer in [0, 2^24)");
    const auto id = it.value().get<int32_t>();
    impl->model_vocab.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  impl->fuse_unk = rd.boolean(m, "fuse_unk", "model", false);
  impl->byte_fallback = rd.boolean(m, "byte_fallback", "model", false);
  impl->ignore_merges = rd.boolean(m, "ignore_merges", "model", false);
  const std::string unk = rd.str(m, "unk_token", "model");
  if (!unk.empty()) {
    auto it = impl->model_vocab.find(unk);
    if (it == impl->model_vocab.end()) return Status::error(where + "model.unk_token '" + unk + "' is not in model.vocab");
    impl->unk_id = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    if (auto it = impl->model_vocab.find(hex); it != impl->model_vocab.end()) impl->byte_token[b] = it->second;
  }
  if (!impl->byte_fallback) std::fill(std::begin(impl->byte_token), std::end(impl->byte_token), -1);
  auto merges = m.find("merges");
  if (merges == m.end() || !merges->is_array()) return Status::error(where + "model.merges: missing (a list)");
  impl->merges.reserve(merges->size() * 2);
  std::string ab;
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& e = (*merges)[i];
    std::string_view a, b;
    if (e.is_string()) {
      const std::string_view s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return Status::error(where + "model.merges[" + std::to_string(i) + "] '" + std::string(s.substr(0, 64)) +
                             "' is not 'a b'");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get_ref<const std::string&>(), b = e[1].get_ref<const std::string&>();
    } else {
      return Status::error(where + "model.merges[" + std::to_string(i) + "] must be \"a b\" or [a, b]");
    }
    ab.assign(a).append(b);
    auto ia = impl->model_vocab.find(a), ib = impl->model_vocab.find(b), iab = impl->model_vocab.find(ab);
    if (ia == impl->model_vocab.end() || ib == impl->model_vocab.end() || iab == impl->model_vocab.end())
      return Status::error(where + "model.merges[" + std::to_string(i) + "]: '" + ab.substr(0, 64) +
                           "' or a part of it is not in model.vocab");
    impl->merges[pair_key(ia->second, ib->second)] = Merge{static_cast<int32_t>(i), iab->second};
  }

  // added tokens
  struct AddedToken {
    int32_t id;
    std::string content;
    bool special, normalized;
  };
  std::vector<AddedToken> added;
  if (auto at = j.find("added_tokens"); at != j.end() && !at->is_null()) {
    if (!at->is_array()) return Status::error(where + "added_tokens must be a list");
    for (size_t i = 0; i < at->size(); ++i) {
      const json& e = (*at)[i];
      const std::string p = "added_tokens[" + std::to_string(i) + "]";
      if (!e.is_object() || !e.contains("id") || !e["id"].is_number_integer() || !e.contains("content") ||
          !e["content"].is_string() || e["id"].get<int64_t>() < 0 || e["id"].get<int64_t>() >= (int64_t{1} << 24))
        return Status::error(where + p + " must have an integer id in [0, 2^24) and a string content");
      AddedToken t{e["id"].get<int32_t>(), e["content"].get<std::string>(), rd.boolean(e, "special", p, false),
                   rd.boolean(e, "normalized", p, true)};
      if (t.content.empty()) return Status::error(where + p + ": empty content");
      impl->added.push_back(Impl::Added{t.id, t.special, rd.boolean(e, "single_word", p, false),
                                        rd.boolean(e, "lstrip", p, false), rd.boolean(e, "rstrip", p, false)});
      added.push_back(std::move(t));
      max_id = std::max(max_id, added.back().id);
    }
  }

  // normalizer, pre-tokenizer, decoder
  if (auto it = j.find("normalizer"); it != j.end() && !it->is_null()) {
    impl->normalizer = rd.normalizer(*it, "normalizer");
    impl->has_normalizer = true;
  }
  if (auto it = j.find("pre_tokenizer"); it != j.end() && !it->is_null()) {
    impl->pre = rd.pre_tokenizer(*it, "pre_tokenizer");
    impl->has_pre = true;
  }
  if (auto it = j.find("decoder"); it != j.end() && !it->is_null()) {
    bool fused = false;
    rd.decoder(*it, "decoder", impl->decoders, &fused, &impl->strip_first_space);
  }
  if (!rd.err.is_ok()) return rd.err;
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& t = added[i];
    if (t.normalized) {
      const std::string n = impl->has_normalizer ? normalize(impl->normalizer, t.content) : t.content;
      if (!n.empty()) impl->normalized_trie.insert(n, static_cast<int32_t>(i));
    } else {
      impl->raw_trie.insert(t.content, static_cast<int32_t>(i));
    }
  }

  // the vocabulary
  VocabData d;
  d.model = "hf-bpe";
  const auto n = static_cast<size_t>(max_id + 1);
  d.tokens.assign(n, std::string());
  d.types.assign(n, static_cast<int32_t>(TokenType::kUndefined));
  for (const auto& [text, id] : impl->model_vocab) {
    d.tokens[id] = text;
    d.types[id] = static_cast<int32_t>(TokenType::kNormal);
  }
  for (int b = 0; b < 256; ++b)
    if (impl->byte_token[b] >= 0) d.types[impl->byte_token[b]] = static_cast<int32_t>(TokenType::kByte);
  if (impl->unk_id >= 0) d.types[impl->unk_id] = static_cast<int32_t>(TokenType::kUnknown);
  TextIds added_ids;  // an added token's text names it before the model's token of that text
  for (const AddedToken& t : added) {
    d.tokens[t.id] = t.content;
    d.types[t.id] = static_cast<int32_t>(t.special ? TokenType::kControl : TokenType::kUserDefined);
    added_ids[t.content] = t.id;
  }
  const std::function<int32_t(const std::string&)> find_text = [&](const std::string& t) -> int32_t {
    if (auto it = added_ids.find(t); it != added_ids.end()) return it->second;
    auto it = impl->model_vocab.find(t);
    return it == impl->model_vocab.end() ? -1 : it->second;
  };
  std::vector<int32_t> prefix, suffix;
  if (auto it = j.find("post_processor"); it != j.end() && !it->is_null()) rd.processor(*it, "post_processor", find_text, prefix, suffix);
  if (!rd.err.is_ok()) return rd.err;
  if (prefix.size() > 1 || suffix.size() > 1)
    return Status::error(where + "post_processor: more than one special token before or after the text is not supported");
  d.bos_id = !prefix.empty() ? prefix[0] : find_text(options.bos_token);
  d.eos_id = !suffix.empty() ? suffix[0] : find_text(options.eos_token);
  if (!options.bos_token.empty() && find_text(options.bos_token) >= 0) d.bos_id = find_text(options.bos_token);
  if (!options.eos_token.empty() && find_text(options.eos_token) >= 0) d.eos_id = find_text(options.eos_token);
  d.unk_id = impl->unk_id >= 0 ? impl->unk_id : find_text(options.unk_token);
  d.pad_id = find_text(options.pad_token);
  d.add_bos = options.add_bos.value_or(!prefix.empty()) && d.bos_id >= 0;
  d.add_eos = options.add_eos.value_or(!suffix.empty()) && d.eos_id >= 0;
  auto vocab = Vocab::from_data(std::move(d));
  if (!vocab) return vocab.status();
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(vocab).value(), std::move(impl)));
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const gguf::GgufFile& file) {
  if (file.find("tokenizer.ggml.model") != nullptr) {
    auto vocab = Vocab::from_gguf(file);
    if (!vocab) return vocab.status();
    return make_tokenizer(*vocab);
  }
  auto text = file.get_string("tokenizer.huggingface.json");
  if (!text)
    return Status::error("[tokenizer] " + file.path() +
                         ": no tokenizer (neither tokenizer.ggml.model nor tokenizer.huggingface.json; a Hugging Face "
                         "folder needs its tokenizer.json)");
  HfTokenizer::Options o;
  o.origin = file.path() + "/tokenizer.json";
  for (auto [key, dst] : {std::pair{"bos_token", &o.bos_token}, std::pair{"eos_token", &o.eos_token},
                          std::pair{"unk_token", &o.unk_token}, std::pair{"pad_token", &o.pad_token}})
    if (auto v = file.get_string(std::string("specula.tokenizer.") + key)) *dst = *v;
  if (auto v = file.get_bool("tokenizer.ggml.add_bos_token")) o.add_bos = *v;
  if (auto v = file.get_bool("tokenizer.ggml.add_eos_token")) o.add_eos = *v;
  auto t = HfTokenizer::create(*text, o);
  if (!t) return t.status();
  return std::unique_ptr<Tokenizer>(std::move(t).value());
}

}  // namespace specula::tokenizer
