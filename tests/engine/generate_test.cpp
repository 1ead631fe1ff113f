// Tests for the suites' reference loop (tests/reference_generate.h: greedy generation,
// consumer stop, refusals) and for chat::end_of_generation_ids on Gemma 3.
#include "chat/prompt.h"
#include "../reference_generate.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "../test_util.h"
#include "tokenizer/tokenizer.h"

namespace specula {
namespace {

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::default_model_present()) GTEST_SKIP() << "model not found: " << testing::default_model_path();
    auto m = load_model(testing::default_model_path());
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = std::move(m).value();
    auto v = tokenizer::Vocab::from_gguf(model_->file());
    ASSERT_TRUE(v.is_ok()) << v.message();
    vocab_ = std::move(v).value();
  }
  std::unique_ptr<Model> model_;
  tokenizer::Vocab vocab_;
};

TEST_F(GenerateTest, EndOfGenerationIdsForGemma3) {
  const auto ids = chat::end_of_generation_ids(vocab_, model_->file());
  EXPECT_NE(std::find(ids.begin(), ids.end(), 1), ids.end());    // <eos>
  EXPECT_NE(std::find(ids.begin(), ids.end(), 106), ids.end());  // <end_of_turn>
}

TEST_F(GenerateTest, GreedyRequestStreamsTokensAndStops) {
  auto cache = testing::make_state(*model_, 1, 256);
  ASSERT_TRUE(cache.is_ok());
  GenerateRequest req;
  req.prompt = {2, 818, 5279, 529, 7001, 563};  // "The capital of France is" (llama.cpp ids)
  req.max_tokens = 6;
  req.sampling.temperature = 0;
  std::vector<int32_t> streamed;
  auto res = generate(*model_, *cache, 0, req, [&](int32_t t) {
    streamed.push_back(t);
    return true;
  });
  ASSERT_TRUE(res.is_ok()) << res.message();
  EXPECT_EQ(res->finish, FinishReason::kLength);
  EXPECT_EQ(res->n_generated, 6);
  EXPECT_EQ(streamed, res->tokens);
  // cancellation from the consumer ends the request
  auto res2 = generate(*model_, *cache, 0, req, [&](int32_t) { return false; });
  ASSERT_TRUE(res2.is_ok());
  EXPECT_EQ(res2->finish, FinishReason::kCancelled);
  EXPECT_EQ(res2->tokens.front(), res->tokens.front());
}

TEST_F(GenerateTest, BadRequestsAreErrors) {
  auto cache = testing::make_state(*model_, 1, 16);
  GenerateRequest req;
  req.sampling.temperature = 0;
  EXPECT_FALSE(generate(*model_, *cache, 0, req, [](int32_t) { return true; }).is_ok());  // empty
  req.prompt = {2, 300000};
  EXPECT_FALSE(generate(*model_, *cache, 0, req, [](int32_t) { return true; }).is_ok());
  req.prompt = std::vector<int32_t>(16, 5);
  auto r = generate(*model_, *cache, 0, req, [](int32_t) { return true; });
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("does not fit the context"), std::string::npos) << r.message();
  req.prompt = {2, 5};
  EXPECT_FALSE(generate(*model_, *cache, 3, req, [](int32_t) { return true; }).is_ok());  // bad row
  req.sampling.top_p = 2.0f;
  req.sampling.temperature = 1.0f;
  EXPECT_FALSE(generate(*model_, *cache, 0, req, [](int32_t) { return true; }).is_ok());
}

}  // namespace
}  // namespace specula
