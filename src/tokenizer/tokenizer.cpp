// tokenizer/tokenizer.cpp — special-token partition, the shared encode/decode driver and
// the tokenizer factory (see tokenizer.h). Algorithms live in their own files (spm.cpp,
// bpe.cpp).
#include "tokenizer/tokenizer.h"

#include <atomic>
#include <cstdio>

#include <algorithm>
#include <map>

#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"

namespace specula::tokenizer {

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) : vocab_(&vocab) {
  if (vocab.empty()) return;
  rank_.assign(static_cast<size_t>(vocab.size()), -1);
  const std::vector<int32_t>& specials = vocab.special_tokens();
  // Build a pointer trie with ordered children, then flatten it breadth-first so that
  // each node's children are one contiguous, byte-sorted run of edges_.
  struct TmpNode {
    int32_t token = -1;
    std::map<uint8_t, int32_t> children;
  };
  std::vector<TmpNode> tmp(1);
  for (size_t r = 0; r < specials.size(); ++r) {
    const int32_t id = specials[r];
    rank_[id] = static_cast<int32_t>(r);
    int32_t node = 0;
    for (char c : vocab.text(id)) {
      const auto b = static_cast<uint8_t>(c);
      auto it = tmp[node].children.find(b);
      if (it == tmp[node].children.end()) {
        tmp.emplace_back();
        const auto next = static_cast<int32_t>(tmp.size() - 1);
        tmp[node].children.emplace(b, next);
        node = next;
      } else {
        node = it->second;
      }
    }
    // Duplicate texts: the vocab index keeps the highest id; only one can match anyway.
    tmp[node].token = id;
  }
  nodes_.resize(tmp.size());
  std::vector<int32_t> order{0};  // BFS order of tmp nodes; position == new index
  std::vector<int32_t> new_index(tmp.size(), -1);
  new_index[0] = 0;
  for (size_t q = 0; q < order.size(); ++q) {
    const TmpNode& t = tmp[order[q]];
    Node& n = nodes_[q];
    n.token = t.token;
    n.first_edge = static_cast<int32_t>(edges_.size());
    n.n_edges = static_cast<int32_t>(t.children.size());
    for (const auto& [b, c] : t.children) {
      new_index[c] = static_cast<int32_t>(order.size());
      order.push_back(c);
      edges_.push_back(Edge{b, new_index[c]});
    }
  }
}

int32_t SpecialTokenSplitter::child(int32_t node, uint8_t byte) const {
  const Node& n = nodes_[node];
  const Edge* begin = edges_.data() + n.first_edge;
  const Edge* end = begin + n.n_edges;
  const Edge* it = std::lower_bound(begin, end, byte, [](const Edge& e, uint8_t b) { return e.byte < b; });
  return (it != end && it->byte == byte) ? it->node : -1;
}

std::vector<Fragment> SpecialTokenSplitter::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back(Fragment{-1, 0, text.size()});
  if (nodes_.empty()) return frags;

  const auto takes_part = [&](int32_t id) {
    const TokenType t = vocab_->type(id);
    return parse_special || t == TokenType::kUserDefined;
  };
  // 1. Which special tokens occur anywhere in the text.
  std::vector<int32_t> found;  // ranks
  for (size_t p = 0; p < text.size(); ++p) {
    int32_t node = 0;
    for (size_t q = p; q < text.size(); ++q) {
      node = child(node, static_cast<uint8_t>(text[q]));
      if (node < 0) break;
      const int32_t id = nodes_[node].token;
      if (id >= 0 && takes_part(id)) found.push_back(rank_[id]);
    }
  }
  if (found.empty()) return frags;
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());

  // 2. Cut them out in llama.cpp's order: per token, every raw fragment, leftmost
  //    non-overlapping occurrences.
  std::vector<Fragment> next;
  for (int32_t r : found) {
    const int32_t id = vocab_->special_tokens()[r];
    const std::string& tok = vocab_->text(id);
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.offset;
      const size_t end = f.offset + f.length;
      const std::string_view window = text.substr(0, end);
      while (begin < end) {
        const size_t m = window.find(tok, begin);
        if (m == std::string_view::npos) break;
        if (m > begin) next.push_back(Fragment{-1, begin, m - begin});
        next.push_back(Fragment{id, m, tok.size()});
        begin = m + tok.size();
      }
      if (begin < end) next.push_back(Fragment{-1, begin, end - begin});
    }
    frags.swap(next);
  }
  return frags;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos_id());
  bool first_after_special = true;
  encode_piece(text, parse_special, &first_after_special, &out);
  if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos_id());
  return out;
}

std::vector<int32_t> Tokenizer::encode_prompt(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out = encode(text, /*add_special=*/true, parse_special);
  if (!vocab_.add_bos() || out.size() < 2 || out[0] != vocab_.bos_id() || out[1] != vocab_.bos_id()) return out;
  // The text starts with the BOS token itself (parsed as special): no second one.
  out.erase(out.begin());
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    std::fprintf(stderr, "[tokenizer] a prompt starts with the BOS token %s: not adding a second one (said once)\n",
                 vocab_.text(vocab_.bos_id()).c_str());
  return out;
}

void Tokenizer::encode_piece(std::string_view part, bool parse_special, bool* first_after_special,
                             std::vector<int32_t>* out) const {
  for (const Fragment& f : splitter_.split(part, parse_special)) {
    if (f.token >= 0) {
      out->push_back(f.token);
      *first_after_special = true;
    } else {
      encode_fragment(part.substr(f.offset, f.length), *first_after_special, out);
      *first_after_special = false;
    }
  }
}

std::vector<int32_t> Tokenizer::encode_segments(std::string_view text,
                                                std::span<const std::pair<size_t, size_t>> untrusted,
                                                bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos_id());
  bool first_after_special = true;
  auto piece = [&](size_t begin, size_t end, bool parse_special) {
    if (begin < end) encode_piece(text.substr(begin, end - begin), parse_special, &first_after_special, &out);
  };
  size_t pos = 0;
  for (const auto& [b, e] : untrusted) {
    const size_t begin = std::min(std::max(b, pos), text.size());
    const size_t end = std::min(e, text.size());
    piece(pos, begin, true);
    piece(begin, end, false);
    pos = std::max(pos, end);
  }
  piece(pos, text.size(), true);
  if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos_id());
  return out;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool remove_special, bool render_special) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!vocab_.valid_id(ids[i])) {
      return Status::error("[tokenizer] id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                           " out of range (vocab size " + std::to_string(vocab_.size()) + ")");
    }
  }
  bool remove_space = strip_leading_space();
  if (remove_special && vocab_.add_bos() && !ids.empty() && ids.front() == vocab_.bos_id()) {
    remove_space = false;  // as llama.cpp: the prefix space is kept after a removed BOS
    ids = ids.subspan(1);
  }
  if (remove_special && vocab_.add_eos() && !ids.empty() && ids.back() == vocab_.eos_id()) {
    ids = ids.subspan(0, ids.size() - 1);
  }
  std::string out;
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (remove_space && !piece.empty() && piece.front() == ' ') piece.erase(0, 1);
    remove_space = false;
    out += piece;
  }
  return out;
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const Vocab& vocab) {
  if (vocab.empty()) return Status::error("[tokenizer] empty vocabulary");
  if (vocab.model() == "llama") return std::unique_ptr<Tokenizer>(new SpmTokenizer(vocab));
  if (vocab.model() == "gpt2") {
    Result<std::unique_ptr<BpeTokenizer>> bpe = BpeTokenizer::create(vocab);
    if (!bpe) return bpe.status();
    return std::unique_ptr<Tokenizer>(std::move(bpe.value()));
  }
  return Status::error("[tokenizer] tokenizer model '" + vocab.model() +
                       "' (tokenizer.ggml.model) is not supported yet");
}

}  // namespace specula::tokenizer
