// core/thread_pool.h — a fixed set of worker threads that run one job at a time.
//
// `run(fn)` calls fn(ith, nth) on every thread (the caller is thread 0) and returns
// when all have finished. Workers spin briefly, then sleep, between jobs, so the
// hundreds of small jobs in one decode step cost microseconds, not syscalls.
// An exception thrown by a job on any thread is rethrown by run() after every thread
// has finished the job. Not reentrant: run() must not be called from inside a job.
// Not a task queue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace specula {

class ThreadPool {
 public:
  // n_threads >= 1 (total, including the calling thread).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }
  void run(const std::function<void(int ith, int nth)>& fn);

  // Split [0, n) into nth contiguous chunks, each a multiple of `align` except the
  // last; returns [begin, end) for thread ith.
  static std::pair<int64_t, int64_t> split(int64_t n, int ith, int nth, int64_t align = 1);

 private:
  void worker(int ith);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
  std::mutex error_mu_;
  std::exception_ptr worker_error_;  // first exception from a worker in the current job
};

// A barrier for the threads of one ThreadPool::run job: wait(nth) returns once all nth
// threads of the job have called it (reusable: the k-th calls of every thread meet). Safe
// because run() calls the job on every thread at once; a thread that skips a wait that the
// others make deadlocks them. Waiters spin, yielding every 128 spins as the pool's own
// waits do (with more threads than free cores the one waited for may need this core).
class SpinBarrier {
 public:
  void wait(int nth);

 private:
  alignas(64) std::atomic<int> count_{0};
  alignas(64) std::atomic<int> gen_{0};
};

// Number of threads to use by default: the cores this process may run on.
int default_thread_count();

}  // namespace specula
