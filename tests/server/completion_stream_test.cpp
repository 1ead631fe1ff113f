// tests/server/completion_stream_test.cpp — server::CompletionStream on the Gemma 3
// tokenizer: stop strings matched across token boundaries and never emitted (not even a
// part of one), held-back text released at the end, logprob entries going out with their
// text, and released text always valid UTF-8 (byte-fallback tokens split a character).
// Feeds token ids directly (no model forward); skipped when the model file is absent.
#include "server/completion_stream.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../test_util.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace specula::server {
namespace {

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
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

class CompletionStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = testing::default_tokenizer().release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << "model not found: " << testing::default_model_path();
  }

  struct Run {
    std::vector<std::string> released;  // text of each wait() after a token (may be empty)
    std::string text;                   // everything released, in order
    std::vector<TokenLogprob> logprobs;
    int consumed = 0;                   // tokens pushed before the stream said stop
    bool stopped = false;
    std::string finish_reason;
  };

  // Pushes `ids` one token at a time (logprob -0.5*i, one alternative), collecting what
  // the stream releases after each, then finishes with kStop (stopped) or kLength.
  static Run feed(const std::vector<int32_t>& ids, std::vector<std::string> stop, bool logprobs) {
    CompletionStream s(*tok_, std::move(stop), logprobs);
    Run r;
    for (size_t i = 0; i < ids.size(); ++i) {
      TokenEvent ev;
      ev.id = ids[i];
      ev.logprob = -0.5f * static_cast<float>(i);
      ev.top = {{ids[i], ev.logprob}};
      const bool keep = s.on_tokens(std::span<const TokenEvent>(&ev, 1));
      ++r.consumed;
      CompletionStream::Update u = s.wait(std::chrono::milliseconds(0));
      EXPECT_FALSE(u.finished);
      r.released.push_back(u.text);
      r.text += u.text;
      for (auto& l : u.logprobs) r.logprobs.push_back(std::move(l));
      if (!keep) {
        r.stopped = true;
        break;
      }
    }
    RequestSummary sum;
    sum.outcome = r.stopped ? Outcome::kStop : Outcome::kLength;
    sum.n_generated = r.consumed;
    s.on_finish(sum);
    CompletionStream::Update u = s.wait(std::chrono::milliseconds(0));
    EXPECT_TRUE(u.finished);
    r.released.push_back(u.text);
    r.text += u.text;
    for (auto& l : u.logprobs) r.logprobs.push_back(std::move(l));
    r.finish_reason = u.finish_reason;
    return r;
  }

  static std::vector<int32_t> ids(const std::string& text) { return tok_->encode(text, false, false); }
  static std::string piece(int32_t id) { return tok_->token_to_piece(id, false); }

  static tokenizer::Tokenizer* tok_;
};
tokenizer::Tokenizer* CompletionStreamTest::tok_ = nullptr;

TEST_F(CompletionStreamTest, NoStopReleasesEverythingAsItComes) {
  const std::string text = "The quick brown fox jumps over the lazy dog.";
  const auto t = ids(text);
  ASSERT_GT(t.size(), 5u);
  Run r = feed(t, {}, false);
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, text);
  EXPECT_EQ(r.finish_reason, "length");
  // Nothing held back without stop strings: each token's text comes out right away.
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(r.released[i], piece(t[i])) << "token " << i;
}

TEST_F(CompletionStreamTest, StopStringAcrossTokensIsNeverEmitted) {
  const std::string text = "The quick brown fox jumps over the lazy dog.";
  const auto t = ids(text);
  // A stop string from the last 2 bytes of token 2 to the first 2 of token 3.
  std::string a = piece(t[2]), b = piece(t[3]);
  ASSERT_GE(a.size(), 2u);
  ASSERT_GE(b.size(), 2u);
  const std::string stop = a.substr(a.size() - 2) + b.substr(0, 2);
  const size_t at = text.find(stop);
  ASSERT_NE(at, std::string::npos);
  Run r = feed(t, {"never-here", stop}, false);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.consumed, 4) << "the stream must stop at the token that completes the stop string";
  EXPECT_EQ(r.text, text.substr(0, at));
  EXPECT_EQ(r.finish_reason, "stop");
  // At no point did the released text run past the part before the stop string.
  std::string so_far;
  for (const std::string& piece_out : r.released) {
    so_far += piece_out;
    EXPECT_EQ(text.substr(0, at).compare(0, so_far.size(), so_far), 0) << "released " << so_far;
  }
}

TEST_F(CompletionStreamTest, PartialStopPrefixIsHeldThenReleased) {
  const std::string text = "Hello world, hello there.";
  const auto t = ids(text);
  // "world!" starts like "world," but never completes: "world" is held while it could
  // still become the stop string, and released when it cannot (or at the end).
  Run r = feed(t, {"world!"}, false);
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, text);
  // A stop string that is a prefix of the tail: held until finish, then released.
  const std::string tail_stop = "there.!!";
  Run r2 = feed(t, {tail_stop}, false);
  EXPECT_FALSE(r2.stopped);
  EXPECT_EQ(r2.text, text);
  EXPECT_EQ(r2.released.back().find("there."), r2.released.back().size() - 6) << "the tail was held to the end";
}

TEST_F(CompletionStreamTest, EarliestOfSeveralStopStringsWins) {
  const std::string text = "one, two, three, four, five";
  Run r = feed(ids(text), {"four", "two", "five"}, false);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "one, ");
}

TEST_F(CompletionStreamTest, StopStringInsideOneToken) {
  const std::string text = "Internationalization matters.";
  const auto t = ids(text);
  const std::string first = piece(t[0]);
  ASSERT_GE(first.size(), 4u);
  const std::string stop = first.substr(1, 2);
  Run r = feed(t, {stop}, false);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.consumed, 1);
  EXPECT_EQ(r.text, first.substr(0, text.find(stop)));
}

TEST_F(CompletionStreamTest, LogprobEntriesFollowTheirText) {
  const std::string text = "The quick brown fox jumps over the lazy dog.";
  const auto t = ids(text);
  Run r = feed(t, {}, true);
  ASSERT_EQ(r.logprobs.size(), t.size());
  std::string joined;
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(r.logprobs[i].token, piece(t[i]));
    EXPECT_FLOAT_EQ(r.logprobs[i].logprob, -0.5f * static_cast<float>(i));
    ASSERT_EQ(r.logprobs[i].top.size(), 1u);
    EXPECT_EQ(r.logprobs[i].top[0].first, piece(t[i]));
    joined += r.logprobs[i].token;
  }
  EXPECT_EQ(joined, r.text);

  // With a stop string: entries of the tokens before it (and of a token that starts
  // before it) go out; none after.
  const std::string stop = "fox";
  Run s = feed(t, {stop}, true);
  ASSERT_TRUE(s.stopped);
  std::string covered;
  for (const TokenLogprob& e : s.logprobs) covered += e.token;
  EXPECT_GE(covered.size(), s.text.size());
  EXPECT_EQ(covered.compare(0, s.text.size(), s.text), 0);
  EXPECT_LE(s.logprobs.size(), static_cast<size_t>(s.consumed));
  size_t start = 0;
  for (const TokenLogprob& e : s.logprobs) {
    EXPECT_LT(start, s.text.size()) << "entry '" << e.token << "' starts at or after the stop string";
    start += e.token.size();
  }
}

TEST_F(CompletionStreamTest, ByteTokensAlwaysReleaseValidUtf8) {
  // "🦀" (F0 9F A6 80) and "é" (C3 A9) fed as byte-fallback tokens, one byte at a time.
  const tokenizer::Vocab& v = tok_->vocab();
  std::vector<int32_t> t = ids("crab ");
  for (uint8_t b : {0xF0, 0x9F, 0xA6, 0x80, 0x20, 0xC3, 0xA9}) {
    const int32_t id = v.byte_to_token(b);
    ASSERT_TRUE(v.valid_id(id)) << "no byte token for " << int(b);
    t.push_back(id);
  }
  const auto tail = ids(" end");
  t.insert(t.end(), tail.begin(), tail.end());
  Run r = feed(t, {}, true);
  for (const std::string& out : r.released) EXPECT_TRUE(valid_utf8(out)) << "invalid UTF-8 released: " << out;
  EXPECT_EQ(r.text, "crab \xF0\x9F\xA6\x80 \xC3\xA9 end");
  EXPECT_EQ(r.logprobs.size(), t.size());

  // A stop string that is the emoji itself: the bytes before it are released, nothing of it.
  Run s = feed(t, {"\xF0\x9F\xA6\x80"}, false);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.text, "crab ");
  // A sequence cut short at the end (max_tokens inside a character) is dropped: no raw
  // bytes and no U+FFFD in the text; its tokens' logprob entries still carry their bytes.
  std::vector<int32_t> cut = ids("x");
  cut.push_back(v.byte_to_token(0xF0));
  cut.push_back(v.byte_to_token(0x9F));
  Run c = feed(cut, {}, true);
  EXPECT_TRUE(valid_utf8(c.text)) << c.text;
  EXPECT_EQ(c.text, "x");
  ASSERT_EQ(c.logprobs.size(), cut.size());
  EXPECT_EQ(c.logprobs[cut.size() - 2].token, "\xF0");
  EXPECT_EQ(c.logprobs[cut.size() - 1].token, "\x9F");
}

TEST_F(CompletionStreamTest, FinishReasons) {
  const auto t = ids("abc");
  for (auto [outcome, name] : {std::pair{Outcome::kStop, "stop"}, std::pair{Outcome::kLength, "length"},
                               std::pair{Outcome::kCancelled, "cancelled"}, std::pair{Outcome::kFailed, "failed"}}) {
    CompletionStream s(*tok_, {}, false);
    TokenEvent ev;
    ev.id = t[0];
    s.on_tokens(std::span<const TokenEvent>(&ev, 1));
    RequestSummary sum;
    sum.outcome = outcome;
    s.on_finish(sum);
    CompletionStream::Update u = s.wait(std::chrono::milliseconds(0));
    EXPECT_TRUE(u.finished);
    EXPECT_EQ(u.finish_reason, name);
    EXPECT_EQ(u.text, piece(t[0]));
    // Later waits keep saying finished, with no text.
    CompletionStream::Update again = s.wait(std::chrono::milliseconds(0));
    EXPECT_TRUE(again.finished);
    EXPECT_TRUE(again.text.empty());
  }
}

}  // namespace
}  // namespace specula::server
