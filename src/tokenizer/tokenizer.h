// tokenizer/tokenizer.h — the Tokenizer interface, the special-token partition shared by
// every algorithm, and the factory that picks an algorithm from the vocab's model name.
//
// Contract (matches llama.cpp's llama_tokenize / llama_detokenize / token_to_piece):
//   encode(text, add_special, parse_special):
//     1. split `text` on special-token texts (partition_special below);
//     2. run the algorithm on each remaining raw fragment; special fragments are their id;
//     3. add BOS in front when add_special && vocab.add_bos(), EOS at the end when
//        add_special && vocab.add_eos() (even when the text starts with BOS itself, as
//        llama_tokenize does).
//   encode_prompt(text, parse_special): what the front doors tokenize a user's prompt
//     with: encode(text, true, parse_special), but a text that starts with the BOS token
//     itself (parsed as special) gets no second one — said once on stderr, as llama.cpp's
//     front ends do.
//   token_to_piece(id, render_special): the bytes of one token; control and unknown
//     tokens are empty unless render_special.
//   decode(ids, remove_special, render_special): concatenated pieces; with
//     remove_special a leading BOS / trailing EOS that add_special would add is dropped.
// Algorithms: "llama" -> SentencePiece BPE (spm.h); "gpt2" -> byte-level BPE (bpe.h).
// Other models: make_tokenizer returns an error naming the model.
// Does not apply chat templates and does not stream (detokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specula/status.h"
#include "tokenizer/vocab.h"

namespace specula::tokenizer {

// One piece of partitioned input: raw text still to be tokenized, or a special token.
struct Fragment {
  int32_t token = -1;       // >= 0: a special token; -1: raw text
  size_t offset = 0;        // raw text: byte range [offset, offset + length) of the input
  size_t length = 0;
};

// Splits text on the texts of vocab.special_tokens(): each special token, longest
// first, is cut out of every raw fragment at each non-overlapping leftmost occurrence
// (llama.cpp tokenizer_st_partition). Control and unknown tokens take part only when
// `parse_special`; user-defined tokens always do. Empty raw fragments are dropped.
// A byte trie finds which special tokens occur at all (O(len(text) * depth)), so only
// those are cut, in the same order — the result equals cutting with every token.
class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocab& vocab);
  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Node {
    int32_t token = -1;       // special token ending here, -1 if none
    int32_t first_edge = -1;  // edges_ index of the first child (children are contiguous)
    int32_t n_edges = 0;
  };
  struct Edge {
    uint8_t byte;
    int32_t node;
  };
  int32_t child(int32_t node, uint8_t byte) const;

  const Vocab* vocab_;
  std::vector<Node> nodes_;  // nodes_[0] is the root
  std::vector<Edge> edges_;
  std::vector<int32_t> rank_;  // [n_vocab] position in vocab.special_tokens(), -1 if not special
};

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)), splitter_(vocab_) {}
  virtual ~Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  const Vocab& vocab() const { return vocab_; }

  // Text (any bytes; invalid UTF-8 becomes byte tokens) to ids. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  std::vector<int32_t> encode_prompt(std::string_view text, bool parse_special) const;

  // encode() of a text in consecutive pieces: the bytes in `untrusted` ranges (sorted,
  // disjoint; a rendered chat prompt's client text, chat_template.h RenderedPrompt) are
  // split and tokenized with special-token parsing off, the rest with it on; each piece
  // is tokenized on its own (a token never spans a boundary), the SentencePiece space
  // prefix as encode() places it. Equals encode(text, add_special, true) when nothing is
  // untrusted. Thread-safe.
  std::vector<int32_t> encode_segments(std::string_view text, std::span<const std::pair<size_t, size_t>> untrusted,
                                       bool add_special) const;

  // Bytes of one token. Id must be valid (checked). Thread-safe.
  virtual std::string token_to_piece(int32_t id, bool render_special) const = 0;

  // Errors: an id outside the vocabulary ("[tokenizer] id 300000 at position 4 out of
  // range (vocab size 262144)").
  // An algorithm may make text of the whole sequence (tokenizer.json's decoders turn byte runs
  // that are not valid UTF-8 into U+FFFD, hf_tokenizer.h); this default concatenates the
  // pieces, raw bytes and all.
  virtual Result<std::string> decode(std::span<const int32_t> ids, bool remove_special, bool render_special) const;

  // Whether decode() drops one leading space of the first piece (SentencePiece with
  // add_space_prefix); the streaming detokenizer applies the same rule.
  virtual bool strip_leading_space() const { return false; }

 protected:
  // Partitions `part` on special tokens and appends its ids (encode()'s steps 1-2).
  // `*first_after_special` is true at the start of the input (and, for this default, after a
  // special token). Algorithms with their own added-token rules override it (hf_tokenizer.h).
  virtual void encode_piece(std::string_view part, bool parse_special, bool* first_after_special,
                    std::vector<int32_t>* out) const;
  // Appends the ids of one raw-text fragment. `first_after_special` is true when the
  // fragment starts the input or follows a special token (SentencePiece adds its space
  // prefix only then).
  virtual void encode_fragment(std::string_view fragment, bool first_after_special,
                               std::vector<int32_t>* out) const = 0;
  Vocab vocab_;
  SpecialTokenSplitter splitter_;
};

// Picks the algorithm for vocab.model(). Errors: "[tokenizer] tokenizer model 't5'
// (tokenizer.ggml.model) is not supported yet"; BPE setup errors (bpe.h) such as
// "[bpe] unsupported pre-tokenizer 'x' (tokenizer.ggml.pre)".
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const Vocab& vocab);

}  // namespace specula::tokenizer
