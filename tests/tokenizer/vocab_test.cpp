// tests/tokenizer/vocab_test.cpp — Vocab validation on hand-built data, and loading the
// real Gemma 3 vocab through GgufFile (skipped when the model file is absent).
#include "tokenizer/vocab.h"

#include <gtest/gtest.h>

#include "../test_util.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "formats/gguf.h"

namespace specula::tokenizer {
namespace {

std::string gemma3_path() { return specula::testing::default_model_path(); }

VocabData small_data() {
  VocabData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>", "a", "b", "ab", "<0x41>"};
  d.scores = {0, 0, 0, -1, -2, -0.5f, 0};
  d.types = {2, 3, 3, 1, 1, 1, 6};
  d.unk_id = 0;
  d.bos_id = 1;
  d.eos_id = 2;
  d.add_bos = true;
  return d;
}

TEST(VocabTest, IndexesTokensAndBytes) {
  Result<Vocab> v = Vocab::from_data(small_data());
  ASSERT_TRUE(v.is_ok()) << v.message();
  EXPECT_EQ(v->size(), 7);
  EXPECT_EQ(v->model(), "llama");
  EXPECT_EQ(v->find("ab"), 5);
  EXPECT_EQ(v->find("ba"), -1);
  EXPECT_EQ(v->byte_to_token(0x41), 6);
  EXPECT_EQ(v->byte_to_token('a'), 3);  // no <0x61>: falls back to the one-byte token
  EXPECT_EQ(v->byte_to_token('z'), -1);
  EXPECT_EQ(v->token_to_byte(6), std::optional<uint8_t>(0x41));
  EXPECT_EQ(v->token_to_byte(3), std::nullopt);  // not a byte token
  // Special tokens: control + unknown, longest first.
  ASSERT_EQ(v->special_tokens().size(), 3u);
  EXPECT_EQ(v->special_tokens()[0], 0);  // "<unk>" (5 bytes)
  EXPECT_EQ(v->text(v->special_tokens()[2]), "<s>");
  // Copies share the table.
  Vocab copy = *v;
  EXPECT_EQ(&copy.text(5), &v->text(5));
}

TEST(VocabTest, DefaultsForMissingScoresAndTypes) {
  VocabData d = small_data();
  d.scores.clear();
  d.types.clear();
  Result<Vocab> v = Vocab::from_data(d);
  ASSERT_TRUE(v.is_ok()) << v.message();
  EXPECT_EQ(v->score(4), 0.0f);
  EXPECT_EQ(v->type(0), TokenType::kNormal);
  EXPECT_TRUE(v->special_tokens().empty());
}

TEST(VocabTest, RejectsMismatchedLengths) {
  VocabData d = small_data();
  d.scores.pop_back();
  Result<Vocab> v = Vocab::from_data(d);
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.message().find("tokenizer.ggml.scores"), std::string::npos) << v.message();
  EXPECT_NE(v.message().find("6 entries, expected 7"), std::string::npos) << v.message();

  d = small_data();
  d.types.push_back(1);
  v = Vocab::from_data(d);
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.message().find("tokenizer.ggml.token_type"), std::string::npos) << v.message();
}

TEST(VocabTest, RejectsBadSpecialIds) {
  VocabData d = small_data();
  d.bos_id = 7;
  Result<Vocab> v = Vocab::from_data(d);
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.message().find("tokenizer.ggml.bos_token_id: id 7 out of range (vocab size 7)"), std::string::npos)
      << v.message();
  d = small_data();
  d.bos_id = -1;  // add_bos without a BOS id
  v = Vocab::from_data(d);
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.message().find("add_bos_token"), std::string::npos) << v.message();
}

TEST(VocabTest, RejectsEmpty) {
  VocabData d = small_data();
  d.tokens.clear();
  d.scores.clear();
  d.types.clear();
  EXPECT_FALSE(Vocab::from_data(d).is_ok());
  d = small_data();
  d.model.clear();
  EXPECT_FALSE(Vocab::from_data(d).is_ok());
}

TEST(VocabTest, EmptyTokenTextIsRenamed) {
  VocabData d = small_data();
  d.tokens[4] = "";
  Result<Vocab> v = Vocab::from_data(d);
  ASSERT_TRUE(v.is_ok()) << v.message();
  EXPECT_EQ(v->text(4), "[EMPTY_4]");
  EXPECT_EQ(v->find(""), -1);
}

TEST(VocabTest, Gemma3FromGguf) {
  const std::string path = gemma3_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found: " << path << " (set SPECULA_MODELS)";
  Result<gguf::GgufFile> f = gguf::GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  Result<Vocab> v = Vocab::from_gguf(*f);
  ASSERT_TRUE(v.is_ok()) << v.message();
  EXPECT_EQ(v->model(), "llama");
  EXPECT_EQ(v->size(), 262144);
  EXPECT_EQ(v->bos_id(), 2);
  EXPECT_EQ(v->eos_id(), 1);
  EXPECT_EQ(v->unk_id(), 3);
  EXPECT_EQ(v->pad_id(), 0);
  EXPECT_TRUE(v->add_bos());
  EXPECT_FALSE(v->add_eos());
  EXPECT_FALSE(v->add_space_prefix());
  EXPECT_EQ(v->text(105), "<start_of_turn>");
  EXPECT_EQ(v->type(105), TokenType::kControl);
  EXPECT_EQ(v->type(107), TokenType::kUserDefined);  // "\n"
  EXPECT_EQ(v->type(238), TokenType::kByte);          // <0x00>
  EXPECT_EQ(v->byte_to_token(0x00), 238);
  EXPECT_EQ(v->byte_to_token(0xFF), 493);
  EXPECT_EQ(v->find("\xE2\x96\x81the"), 506);
  // "</s>" is stored as user-defined; llama.cpp treats it as control (end-of-generation).
  EXPECT_EQ(v->type(212), TokenType::kControl);
}

}  // namespace
}  // namespace specula::tokenizer
