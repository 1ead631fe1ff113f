// tokenizer/spm.cpp — SentencePiece BPE merge loop and piece rendering (see spm.h).
#include "tokenizer/spm.h"

#include <queue>

namespace specula::tokenizer {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

// Byte length of the UTF-8 sequence introduced by lead byte `c` (1 for continuation
// and invalid bytes, so that every byte is covered).
size_t utf8_len(uint8_t c) {
  static constexpr size_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

struct Symbol {
  int32_t prev;
  int32_t next;
  size_t offset;  // into the escaped text
  size_t n;       // bytes; 0 once merged into its left neighbour
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  size_t size;  // bytes of left+right when queued (stale if either changed since)
};

// Max-heap order: higher score first, then the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void SpmTokenizer::encode_fragment(std::string_view fragment, bool first_after_special,
                                   std::vector<int32_t>* out) const {
  std::string text;
  text.reserve(fragment.size() * 3 + 3);
  if (vocab_.add_space_prefix() && first_after_special) text += kSpaceMarker;
  for (char c : fragment) {
    if (c == ' ') {
      text += kSpaceMarker;
    } else {
      text += c;
    }
  }
  if (text.empty()) return;

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const auto index = static_cast<int32_t>(symbols.size());
    off += n;
    symbols.push_back(Symbol{index - 1, off == text.size() ? -1 : index + 1, off - n, n});
  }

  std::vector<Bigram> heap_storage;
  heap_storage.reserve(symbols.size() * 2);
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue(BigramLess{}, std::move(heap_storage));
  const std::string_view view(text);
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[left].n + symbols[right].n;
    const int32_t id = vocab_.find(view.substr(symbols[left].offset, size));
    if (id < 0) return;
    queue.push(Bigram{vocab_.score(id), left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Stale: one side was merged away or grew since this pair was queued.
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = view.substr(s.offset, s.n);
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Byte fallback (only single characters reach here: merges always form tokens).
    for (char c : piece) {
      const int32_t byte_id = vocab_.byte_to_token(static_cast<uint8_t>(c));
      if (byte_id >= 0) {
        out->push_back(byte_id);
      } else if (vocab_.unk_id() >= 0) {
        out->push_back(vocab_.unk_id());
      }
    }
  }
}

std::string SpmTokenizer::token_to_piece(int32_t id, bool render_special) const {
  SPECULA_CHECK(vocab_.valid_id(id));
  switch (vocab_.type(id)) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      return render_special ? vocab_.text(id) : std::string();
    case TokenType::kUserDefined:
      return vocab_.text(id);
    case TokenType::kNormal: {
      const std::string& t = vocab_.text(id);
      std::string out;
      out.reserve(t.size());
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
          out += ' ';
          i += kSpaceMarker.size();
        } else {
          out += t[i++];
        }
      }
      return out;
    }
    case TokenType::kByte: {
      const std::optional<uint8_t> b = vocab_.token_to_byte(id);
      return b ? std::string(1, static_cast<char>(*b)) : std::string();
    }
    case TokenType::kUnused:
    case TokenType::kUndefined:
      return std::string();
  }
  return std::string();
}

}  // namespace specula::tokenizer
