// Tests for core/thread_pool: every thread runs each job once; split covers [0,n).
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>
#include <stdexcept>

namespace specula {
TEST(ThreadPool, RunsEveryThreadOncePerJob) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 1000; ++rep) {
    std::atomic<int> mask{0};
    pool.run([&](int ith, int nth) {
      EXPECT_EQ(nth, 3);
      mask.fetch_or(1 << ith);
    });
    ASSERT_EQ(mask.load(), 7);
  }
}

TEST(ThreadPool, SplitCoversRangeAligned) {
  for (int64_t n : {0, 1, 7, 64, 1000, 262144}) {
    for (int nth : {1, 2, 3, 8}) {
      int64_t expect = 0;
      for (int i = 0; i < nth; ++i) {
        auto [b, e] = ThreadPool::split(n, i, nth, 16);
        EXPECT_EQ(b, expect);
        EXPECT_GE(e, b);
        if (e < n) {
          EXPECT_EQ(e % 16, 0);
        }
        expect = e;
      }
      EXPECT_EQ(expect, n);
    }
  }
}
}  // namespace specula

namespace specula {
TEST(ThreadPool, ExceptionsAreRethrownAfterAllThreadsFinish) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  EXPECT_THROW(pool.run([&](int ith, int) {
    done.fetch_add(1);
    if (ith == 1) throw std::runtime_error("worker failed");
  }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 2);
  EXPECT_THROW(pool.run([&](int ith, int) {
    if (ith == 0) throw std::runtime_error("caller failed");
  }),
               std::runtime_error);
  // still usable
  std::atomic<int> n{0};
  pool.run([&](int, int) { n.fetch_add(1); });
  EXPECT_EQ(n.load(), 2);
}

// SpinBarrier: every phase's writes are seen by every thread after the barrier, phase after
// phase, with more threads than this machine's cores (the waiters must yield).
TEST(SpinBarrier, PhasesSeeEveryThreadsWrites) {
  for (int threads : {2, 5}) {
    ThreadPool pool(threads);
    std::vector<int> slot(static_cast<size_t>(threads), -1);
    std::atomic<int> wrong{0};
    SpinBarrier barrier;
    pool.run([&](int ith, int nth) {
      for (int phase = 0; phase < 200; ++phase) {
        slot[static_cast<size_t>(ith)] = phase;
        barrier.wait(nth);
        for (int j = 0; j < nth; ++j)
          if (slot[static_cast<size_t>(j)] != phase) wrong.fetch_add(1);
        barrier.wait(nth);
      }
    });
    EXPECT_EQ(wrong.load(), 0) << threads << " threads";
  }
}
}  // namespace specula
