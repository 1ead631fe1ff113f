// tokenizer/bpe.cpp — byte-level BPE: UTF-8 repair, PCRE2 pre-tokenizer, rank-ordered
// merge loop and piece rendering (see bpe.h). Does not split special tokens
// (tokenizer.cpp) and does not stream (detokenizer.cpp).
#include "tokenizer/bpe.h"

#include <atomic>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <optional>
#include <unordered_map>

#include "core/utf8.h"
#include "tokenizer/byte_alphabet.h"

namespace specula::tokenizer {
namespace {

// llama.cpp's whitespace set (src/unicode-data.cpp unicode_set_whitespace); PCRE2's \s
// lacks U+0085, so the patterns spell it out.
#define SPECULA_BPE_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
// Letters and numbers as in llama.cpp's tables (Unicode 15.1): \p{L} / \p{N} plus the
// code points assigned in Unicode 15.0/15.1 that an older PCRE2 (10.42: Unicode 14)
// does not know yet (harmless with a newer PCRE2, where they already belong).
#define SPECULA_BPE_L                                                                              \
  "\\p{L}\\x{1123F}-\\x{11240}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}"          \
  "\\x{13441}-\\x{13446}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}" \
  "\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"
#define SPECULA_BPE_N "\\p{N}\\x{11F50}-\\x{11F59}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}"

constexpr const char* kQwen2Pattern =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n" SPECULA_BPE_L SPECULA_BPE_N "]?[" SPECULA_BPE_L "]+"
    "|[" SPECULA_BPE_N "]"
    "| ?[^" SPECULA_BPE_WS SPECULA_BPE_L SPECULA_BPE_N "]+[\\r\\n]*"
    "|[" SPECULA_BPE_WS "]*[\\r\\n]+"
    "|[" SPECULA_BPE_WS "]+(?![^" SPECULA_BPE_WS "])"
    "|[" SPECULA_BPE_WS "]+";

constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?[" SPECULA_BPE_L "]+"
    "| ?[" SPECULA_BPE_N "]+"
    "| ?[^" SPECULA_BPE_WS SPECULA_BPE_L SPECULA_BPE_N "]+"
    "|[" SPECULA_BPE_WS "]+(?![^" SPECULA_BPE_WS "])"
    "|[" SPECULA_BPE_WS "]+";

#undef SPECULA_BPE_WS
#undef SPECULA_BPE_L
#undef SPECULA_BPE_N

// tokenizer.ggml.pre names -> pattern (llama.cpp llama_vocab::impl::load, the
// pre_type switch in llm_tokenizer_bpe).
const char* pattern_for(const std::string& pre) {
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "kormo" || pre == "f2llmv2") return kQwen2Pattern;
  if (pre == "gpt-2" || pre == "gpt2" || pre == "mpt" || pre == "olmo" || pre == "jais" || pre == "trillion" ||
      pre == "granite-docling") {
    return kGpt2Pattern;
  }
  return nullptr;
}

constexpr uint64_t kEmptyKey = ~uint64_t{0};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

size_t hash_key(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return static_cast<size_t>(k);
}

bool is_cont(uint8_t c) { return (c & 0xC0) == 0x80; }


// llama.cpp's lenient decode + re-encode (unicode_cpts_from_utf8, unicode_cpt_to_utf8):
// `clean` is what its BPE sees; `subject` equals it with surrogates (which llama.cpp
// classes as control characters) replaced by U+FFFD — same length, same regex class,
// and valid for PCRE2.
void repair_utf8(std::string_view s, std::string* clean, std::string* subject) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  clean->reserve(n + 8);
  subject->reserve(n + 8);
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  for (size_t i = 0; i < n;) {
    const uint8_t c = p[i];
    uint32_t cp = 0;
    size_t len = 0;
    if (c < 0x80) {
      cp = c;
      len = 1;
    } else if ((c & 0x40) == 0) {
      len = 0;  // stray continuation byte
    } else if ((c & 0x20) == 0) {
      if (i + 1 < n && is_cont(p[i + 1])) {
        cp = ((c & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
        len = 2;
      }
    } else if ((c & 0x10) == 0) {
      if (i + 2 < n && is_cont(p[i + 1]) && is_cont(p[i + 2])) {
        cp = ((c & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu);
        len = 3;
      }
    } else if ((c & 0x08) == 0) {
      if (i + 3 < n && is_cont(p[i + 1]) && is_cont(p[i + 2]) && is_cont(p[i + 3])) {
        cp = ((c & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) | (p[i + 3] & 0x3Fu);
        len = cp <= 0x10FFFF ? 4 : 0;
      }
    }
    if (len == 0) {
      clean->append(kReplacement);
      subject->append(kReplacement);
      ++i;
      continue;
    }
    const size_t before = clean->size();
    utf8_append(cp, *clean);
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      subject->append(kReplacement);
    } else {
      subject->append(*clean, before, std::string::npos);
    }
    i += len;
  }
}

size_t utf8_char_len(uint8_t c) {
  static constexpr size_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

struct Symbol {
  int32_t id;    // symbol id; -1 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;   // ids when queued; the candidate is stale once either changed
  int32_t right_id;
  int32_t merged;
};

// Min-heap order for std::*_heap (which keeps the max on top): lower rank first,
// then the leftmost pair — llama.cpp llm_bigram_bpe::comparator.
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

std::atomic<int64_t> g_scratch_bytes{0};

// One thread's encode_word scratch; keeps at most kKeep symbols' worth between words.
struct ScratchBuffers {
  static constexpr size_t kKeep = size_t{1} << 14;  // 192 KiB of symbols + 1.5 MiB of heap
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  int64_t counted = 0;
  void trim() {
    if (symbols.capacity() > kKeep) std::vector<Symbol>().swap(symbols);
    if (heap.capacity() > 4 * kKeep) std::vector<Candidate>().swap(heap);
    const auto now = static_cast<int64_t>(symbols.capacity() * sizeof(Symbol) + heap.capacity() * sizeof(Candidate));
    if (now == counted) return;  // the common case: no shared write
    g_scratch_bytes.fetch_add(now - counted, std::memory_order_relaxed);
    counted = now;
  }
  ~ScratchBuffers() { g_scratch_bytes.fetch_sub(counted, std::memory_order_relaxed); }
};

}  // namespace

int64_t bpe_scratch_bytes() { return g_scratch_bytes.load(std::memory_order_relaxed); }

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

BpeTokenizer::BpeTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)) {}
BpeTokenizer::~BpeTokenizer() = default;

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(const Vocab& vocab) {
  if (vocab.empty()) return Status::error("[bpe] empty vocabulary");
  const char* pattern = pattern_for(vocab.pre());
  if (pattern == nullptr) {
    const std::string model = " for tokenizer model '" + vocab.model() + "'";
    if (vocab.pre().empty()) {
      return Status::error("[bpe] missing pre-tokenizer (tokenizer.ggml.pre)" + model +
                           "; llama.cpp's fallback 'default' is not supported");
    }
    return Status::error("[bpe] unsupported pre-tokenizer '" + vocab.pre() + "' (tokenizer.ggml.pre)" + model);
  }
  const std::vector<std::string>& merges = vocab.merges();
  if (merges.empty()) return Status::error("[bpe] tokenizer.ggml.merges: no merges (required by byte-level BPE)");

  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(vocab));
  t->regex_ = std::make_unique<Regex>();
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  t->regex_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (t->regex_->code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return Status::error("[bpe] pre-tokenizer '" + vocab.pre() + "': regex compile error at " +
                         std::to_string(err_offset) + ": " + reinterpret_cast<const char*>(buf));
  }
  pcre2_jit_compile(t->regex_->code, PCRE2_JIT_COMPLETE);  // optional: matching falls back to the interpreter

  // Symbol ids: the vocab id of a text, else a synthetic id past the vocab.
  const auto n_vocab = static_cast<int32_t>(vocab.size());
  std::unordered_map<std::string, int32_t> synthetic_index;
  const auto resolve = [&](const std::string& text) -> int32_t {
    const int32_t id = vocab.find(text);
    if (id >= 0) return id;
    auto [it, inserted] = synthetic_index.emplace(text, n_vocab + static_cast<int32_t>(t->synthetic_.size()));
    if (inserted) t->synthetic_.push_back(text);
    return it->second;
  };
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(alphabet().to_cp[b], ch);
    t->byte_symbol_[b] = resolve(ch);
  }

  size_t cap = 16;
  while (cap < 2 * merges.size()) cap <<= 1;
  t->merges_.assign(cap, Merge{kEmptyKey, 0, 0});
  t->merge_mask_ = cap - 1;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 >= m.size()) {
      return Status::error("[bpe] tokenizer.ggml.merges: entry " + std::to_string(i) + " '" + m.substr(0, 64) +
                           "' is not 'left right'");
    }
    const std::string left = m.substr(0, space);
    const std::string right = m.substr(space + 1);
    const int32_t l = resolve(left);
    const int32_t r = resolve(right);
    const int32_t merged = resolve(left + right);
    const uint64_t key = pair_key(l, r);
    size_t s = hash_key(key) & t->merge_mask_;
    while (t->merges_[s].key != kEmptyKey && t->merges_[s].key != key) s = (s + 1) & t->merge_mask_;
    if (t->merges_[s].key == key) continue;  // duplicate: the first (lowest) rank wins, as llama.cpp
    t->merges_[s] = Merge{key, static_cast<int32_t>(i), merged};
  }
  return t;
}

const BpeTokenizer::Merge* BpeTokenizer::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (size_t s = hash_key(key) & merge_mask_;; s = (s + 1) & merge_mask_) {
    const Merge& m = merges_[s];
    if (m.key == key) return &m;
    if (m.key == kEmptyKey) return nullptr;
  }
}

const std::string& BpeTokenizer::symbol_text(int32_t id) const {
  return id < vocab_.size() ? vocab_.text(id) : synthetic_[static_cast<size_t>(id - vocab_.size())];
}

std::vector<std::pair<size_t, size_t>> BpeTokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> spans;
  const size_t n = text.size();
  if (n == 0) return spans;
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(pcre2_match_data_create(1, nullptr),
                                                                    pcre2_match_data_free);
  if (md == nullptr) {
    spans.emplace_back(0, n);
    return spans;
  }
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // Invalid UTF-8 is never passed with NO_UTF_CHECK: check once here.
  const uint32_t check = utf8_valid(text) ? PCRE2_NO_UTF_CHECK : 0;
  size_t pos = 0;
  while (pos < n) {
    int rc = pcre2_match(regex_->code, subject, n, pos, check, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(regex_->code, subject, n, pos, check | PCRE2_NO_JIT, md.get(), nullptr);
    if (rc < 0) {  // no match, resource limit or invalid input: the rest is one word
      spans.emplace_back(pos, n - pos);
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0];
    size_t end = ov[1];
    if (start > pos) spans.emplace_back(pos, start - pos);  // an unmatched gap is a word of its own
    if (end <= start) end = std::min(n, start + utf8_char_len(static_cast<uint8_t>(text[start])));
    spans.emplace_back(start, end - start);
    pos = end;
  }
  return spans;
}

void BpeTokenizer::encode_fragment(std::string_view fragment, bool /*first_after_special*/,
                                   std::vector<int32_t>* out) const {
  std::string clean_storage;
  std::string subject_storage;
  std::string_view clean = fragment;
  std::string_view subject = fragment;
  if (!utf8_valid(fragment)) {
    repair_utf8(fragment, &clean_storage, &subject_storage);
    clean = clean_storage;
    subject = subject_storage;
  }
  for (const auto& [offset, length] : pre_tokenize(subject)) encode_word(clean.substr(offset, length), out);
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  const int32_t n_vocab = vocab_.size();
  const auto emit = [&](int32_t id) {
    if (id < n_vocab) {
      out->push_back(id);
      return;
    }
    // Not a token: llama.cpp looks up each byte of the encoded text as a one-byte token.
    for (char c : symbol_text(id)) {
      const int32_t b = vocab_.find(std::string_view(&c, 1));
      if (b >= 0) out->push_back(b);
    }
  };
  const auto n = static_cast<int32_t>(word.size());
  if (n == 0) return;
  if (n == 1) {
    emit(byte_symbol_[static_cast<uint8_t>(word[0])]);
    return;
  }
  // Scratch reused across words of one thread (encode stays thread-safe). A huge word
  // (e.g. a 1 MiB run of one letter in a hostile prompt) grows it to tens of MB; that is
  // released when the word is done, so no server thread keeps the peak of the longest
  // word it ever saw. Held bytes are counted in bpe_scratch_bytes().
  thread_local ScratchBuffers scratch;
  struct Release {
    ScratchBuffers& s;
    ~Release() { s.trim(); }
  } release{scratch};
  std::vector<Symbol>& symbols = scratch.symbols;
  std::vector<Candidate>& heap = scratch.heap;
  symbols.resize(static_cast<size_t>(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = Symbol{byte_symbol_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Merge* m = find_merge(symbols[left].id, symbols[right].id);
    if (m == nullptr) return;
    heap.push_back(Candidate{m->rank, left, right, symbols[left].id, symbols[right].id, m->merged});
    std::push_heap(heap.begin(), heap.end(), CandidateAfter{});
  };
  for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandidateAfter{});
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = symbols[c.left];
    Symbol& r = symbols[c.right];
    if (l.id != c.left_id || r.id != c.right_id) continue;  // stale
    l.id = c.merged;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = c.left;
    r.id = -1;
    try_add(l.prev, c.left);
    try_add(c.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) emit(symbols[i].id);
}

std::string BpeTokenizer::token_to_piece(int32_t id, bool render_special) const {
  SPECULA_CHECK(vocab_.valid_id(id));
  const std::string& text = vocab_.text(id);
  switch (vocab_.type(id)) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      return render_special ? text : std::string();
    case TokenType::kUserDefined:
      return text;
    case TokenType::kByte: {
      const std::optional<uint8_t> b = vocab_.token_to_byte(id);
      return b ? std::string(1, static_cast<char>(*b)) : std::string();
    }
    case TokenType::kNormal:
      break;
    default:
      return std::string();
  }
  // Normal token: byte alphabet -> raw bytes.
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      const int16_t b = alphabet().to_byte[c];
      out.push_back(b >= 0 ? static_cast<char>(b) : static_cast<char>(c));
      ++i;
      continue;
    }
    const size_t len = std::min(utf8_char_len(c), n - i);
    if (len == 2 && is_cont(p[i + 1])) {
      const uint32_t cp = ((c & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
      if (cp < alphabet().to_byte.size() && alphabet().to_byte[cp] >= 0) {
        out.push_back(static_cast<char>(alphabet().to_byte[cp]));
        i += 2;
        continue;
      }
    }
    out.append(text, i, len);  // outside the alphabet: copy the character
    i += len;
  }
  return out;
}

}  // namespace specula::tokenizer
