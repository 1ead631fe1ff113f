// Tests for core/strings.h: the comma-separated lists of --host, --alias, --tags and
// --cors-origin.
#include <gtest/gtest.h>

#include "core/strings.h"

namespace specula {
namespace {

TEST(SplitList, TrimsDropsEmptiesAndRepeatsKeepsOrder) {
  EXPECT_EQ(split_list("zeta, alpha"), (std::vector<std::string>{"zeta", "alpha"}));
  EXPECT_EQ(split_list(" a,\tb ,,c,a"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(split_list("127.0.0.1,::1"), (std::vector<std::string>{"127.0.0.1", "::1"}));
  EXPECT_TRUE(split_list("").empty());
  EXPECT_TRUE(split_list(" , ,").empty());
  EXPECT_EQ(split_list("one"), (std::vector<std::string>{"one"}));
}

}  // namespace
}  // namespace specula
