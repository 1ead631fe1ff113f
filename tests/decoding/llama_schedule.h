// tests/decoding/llama_schedule.h — drives a draft source on llama.cpp's schedule: the
// drafts a greedy llama.cpp run made (tools/llama_spec_oracle.cpp's JSON: every draft with
// the context length n it continued and the accepted count) are compared, one by one, with
// the source's drafts at the same n, the source fed as the engine feeds it (prefill of the
// prompt but its last token, then draft / commit up to where llama.cpp drafted next).
// The target's states come from one forward over the whole sequence (`base`: hidden and/or
// taps, positions = packed indices).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "decoding/draft.h"

namespace specula::testing {

struct ScheduleCount {
  int compared = 0, accepted = 0, skipped = 0;
};

// seq: prompt + llama.cpp's tokens. near_tie(n, j): true when the draft j at n may differ
// (then the rest of that chain is not compared).
inline void check_llama_schedule(DraftSource& source, const nlohmann::json& run, const std::vector<int32_t>& seq,
                                 const VerifyContext& base, const std::string& what, ScheduleCount& count,
                                 const std::function<bool(int64_t, int32_t)>& near_tie = nullptr) {
  const auto prompt_len = static_cast<int64_t>(run["prompt"].size());
  const auto feed = [&](int64_t from, int64_t kept, int64_t len, bool prefill) {
    const std::vector<int64_t> first{from}, pos{from}, keep{kept};
    VerifyContext vc = base;
    vc.first = first;
    vc.pos = pos;
    vc.kept = keep;
    const DraftRow row{1, std::span<const int32_t>(seq.data(), static_cast<size_t>(len)), 0};
    if (prefill)
      ASSERT_TRUE(source.prefill(std::span<const DraftRow>(&row, 1), &vc).is_ok());
    else
      source.commit(std::span<const DraftRow>(&row, 1), &vc);
  };
  feed(0, prompt_len - 1, prompt_len - 1, true);  // llama.cpp keeps the prompt's last token pending
  const auto& drafts = run["drafts"];
  for (size_t i = 0; i < drafts.size(); ++i) {
    const int64_t n = drafts[i]["n"].get<int64_t>();
    const auto want = drafts[i]["draft"].get<std::vector<int32_t>>();
    const auto depth = static_cast<int32_t>(want.size());
    std::vector<std::vector<int32_t>> got;
    const DraftRow row{1, std::span<const int32_t>(seq.data(), static_cast<size_t>(n)), depth};
    ASSERT_TRUE(source.draft(std::span<const DraftRow>(&row, 1), got).is_ok());
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].size(), want.size()) << what << " n " << n;
    int32_t j = 0;
    for (; j < depth; ++j) {
      if (near_tie && near_tie(n, j)) {
        ++count.skipped;
        break;
      }
      EXPECT_EQ(got[0][j], want[j]) << what << " n " << n << " draft " << j;
      ++count.compared;
    }
    // Greedy acceptance: the drafts equal to the sequence's next tokens.
    int64_t a = 0;
    while (a < depth && n + a < static_cast<int64_t>(seq.size()) && got[0][a] == seq[n + a]) ++a;
    if (j == depth) {
      EXPECT_EQ(a, drafts[i]["accepted"].get<int64_t>()) << what << " n " << n;
    }
    count.accepted += static_cast<int>(a);
    // Commit up to where llama.cpp drafted next (after a partial acceptance it verified one
    // more token before drafting again).
    const int64_t next = i + 1 < drafts.size() ? drafts[i + 1]["n"].get<int64_t>() : static_cast<int64_t>(seq.size());
    feed(n - 1, next - n, next, false);
  }
}

}  // namespace specula::testing
