// tests/tokenizer/detokenizer_test.cpp — StreamingDetokenizer: UTF-8 hold-back and
// replacement rules on byte strings, and token-by-token streaming of emoji/CJK text on
// Gemma 3 (skipped when the model is absent).
#include "tokenizer/detokenizer.h"

#include <gtest/gtest.h>

#include "../test_util.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace specula::tokenizer {
namespace {

constexpr const char* kFffd = "\xEF\xBF\xBD";

// True when `s` is well-formed UTF-8 (checked independently of the code under test).
bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    uint32_t cp;
    int n;
    if (c < 0x80) { cp = c; n = 1; }
    else if ((c & 0xE0) == 0xC0) { cp = c & 0x1F; n = 2; }
    else if ((c & 0xF0) == 0xE0) { cp = c & 0x0F; n = 3; }
    else if ((c & 0xF8) == 0xF0) { cp = c & 0x07; n = 4; }
    else return false;
    if (i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      const auto d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

std::string valid_prefix(std::string_view bytes, size_t* held) {
  std::string out;
  *held = StreamingDetokenizer::append_valid_utf8(bytes, &out);
  return out;
}

TEST(Utf8Test, HoldsBackIncompleteTail) {
  size_t held = 0;
  EXPECT_EQ(valid_prefix("ab\xF0\x9F\x98", &held), "ab");
  EXPECT_EQ(held, 3u);
  EXPECT_EQ(valid_prefix("\xE4\xBD", &held), "");
  EXPECT_EQ(held, 2u);
  EXPECT_EQ(valid_prefix("\xF0\x9F\x98\x80x", &held), "\xF0\x9F\x98\x80x");
  EXPECT_EQ(held, 0u);
}

TEST(Utf8Test, ReplacesMaximalInvalidSubparts) {
  size_t held = 0;
  // Stray continuation byte, invalid lead bytes.
  EXPECT_EQ(valid_prefix("a\x80" "b\xFF", &held), std::string("a") + kFffd + "b" + kFffd);
  EXPECT_EQ(held, 0u);
  // Truncated 3-byte sequence followed by ASCII: one U+FFFD for the two bytes.
  EXPECT_EQ(valid_prefix("\xE2\x82x", &held), std::string(kFffd) + "x");
  // Overlong (C0) and surrogate (ED A0 80): every byte is its own subpart.
  EXPECT_EQ(valid_prefix("\xC0\xAF", &held), std::string(kFffd) + kFffd);
  EXPECT_EQ(valid_prefix("\xED\xA0\x80", &held), std::string(kFffd) + kFffd + kFffd);
  // Beyond U+10FFFF.
  EXPECT_EQ(valid_prefix("\xF4\x90\x80\x80", &held), std::string(kFffd) + kFffd + kFffd + kFffd);
  EXPECT_EQ(held, 0u);
}

// ---------------------------------------------------------------- tiny vocab

std::unique_ptr<Tokenizer> byte_tokenizer() {
  VocabData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    d.tokens.push_back(buf);
    d.types.push_back(6);
  }
  d.unk_id = 0;
  d.bos_id = 1;
  d.eos_id = 2;
  Result<Vocab> v = Vocab::from_data(d);
  SPECULA_CHECK(v.is_ok());
  return std::move(make_tokenizer(*v).value());
}

TEST(StreamingDetokenizerTest, ByteTokensEmitWholeCharacters) {
  auto tok = byte_tokenizer();
  StreamingDetokenizer s(*tok);
  const std::string text = "x\xF0\x9F\x98\x80\xE4\xBD\xA0";  // x 😀 你
  std::vector<std::string> outs;
  for (unsigned char c : text) outs.push_back(s.push(3 + c).value());
  EXPECT_EQ(outs, (std::vector<std::string>{"x", "", "", "", "\xF0\x9F\x98\x80", "", "", "\xE4\xBD\xA0"}));
  EXPECT_EQ(s.finish(), "");
}

TEST(StreamingDetokenizerTest, FinishReplacesIncompleteTail) {
  auto tok = byte_tokenizer();
  StreamingDetokenizer s(*tok);
  EXPECT_EQ(s.push(3 + 'a').value(), "a");
  EXPECT_EQ(s.push(3 + 0xF0).value(), "");
  EXPECT_EQ(s.push(3 + 0x9F).value(), "");
  EXPECT_EQ(s.pending_bytes(), 2u);
  EXPECT_EQ(s.finish(), kFffd);
  EXPECT_EQ(s.pending_bytes(), 0u);
  // An invalid byte is replaced at once, not held.
  EXPECT_EQ(s.push(3 + 0xFF).value(), kFffd);
}

TEST(StreamingDetokenizerTest, ControlTokensAndBadIds) {
  auto tok = byte_tokenizer();
  StreamingDetokenizer plain(*tok);
  EXPECT_EQ(plain.push(1).value(), "");
  StreamingDetokenizer rendered(*tok, /*render_special=*/true);
  EXPECT_EQ(rendered.push(1).value(), "<s>");
  Result<std::string> bad = plain.push(100000);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("[detokenizer] id 100000 out of range"), std::string::npos) << bad.message();
}

// ---------------------------------------------------------------- Gemma 3

std::string gemma3_path() { return specula::testing::default_model_path(); }

TEST(StreamingDetokenizerTest, Gemma3EmojiAndCjkTokenByToken) {
  const std::string path = gemma3_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path << " (set SPECULA_MODELS)";
  Result<gguf::GgufFile> f = gguf::GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  Result<Vocab> v = Vocab::from_gguf(*f);
  ASSERT_TRUE(v.is_ok()) << v.message();
  Result<std::unique_ptr<Tokenizer>> tok = make_tokenizer(*v);
  ASSERT_TRUE(tok.is_ok()) << tok.message();

  const std::string text =
      "Emoji 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️‍🔥, rare 𝄞𐍈\U000E0041龘靐齉, 中文：你好世界 日本語 한국어.";
  const std::vector<int32_t> ids = (*tok)->encode(text, /*add_special=*/true, /*parse_special=*/false);
  // The rare characters must have gone through byte fallback, or the test is vacuous.
  int byte_tokens = 0;
  for (int32_t id : ids) byte_tokens += v->is_byte(id) ? 1 : 0;
  EXPECT_GE(byte_tokens, 4);

  StreamingDetokenizer s(**tok);
  std::string all;
  int held_steps = 0;
  for (int32_t id : ids) {
    Result<std::string> piece = s.push(id);
    ASSERT_TRUE(piece.is_ok()) << piece.message();
    EXPECT_TRUE(is_valid_utf8(*piece)) << "token " << id << " emitted invalid UTF-8";
    held_steps += s.pending_bytes() > 0 ? 1 : 0;
    all += *piece;
  }
  all += s.finish();
  EXPECT_GT(held_steps, 0);
  EXPECT_EQ(all, text);
}

}  // namespace
}  // namespace specula::tokenizer
