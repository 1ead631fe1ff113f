// core/thread_pool.cpp — spin-then-sleep worker pool (see thread_pool.h).
#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <exception>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPECULA_PAUSE() _mm_pause()
#else
#define SPECULA_PAUSE() ((void)0)
#endif

namespace specula {

int default_thread_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::pair<int64_t, int64_t> ThreadPool::split(int64_t n, int ith, int nth, int64_t align) {
  const int64_t blocks = (n + align - 1) / align;
  const int64_t per = blocks / nth, extra = blocks % nth;
  const int64_t b0 = ith * per + std::min<int64_t>(ith, extra);
  const int64_t b1 = b0 + per + (ith < extra ? 1 : 0);
  return {std::min(n, b0 * align), std::min(n, b1 * align)};
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Publishing under the mutex pairs with sleepers' wait predicate.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) cv_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0, n_threads_);
  } catch (...) {
    mine = std::current_exception();
  }
  // Always wait: workers still use `fn` until pending_ reaches 0. Spin, but give the CPU
  // away now and then: when the machine is oversubscribed (another process, more threads
  // than cores) the worker we wait for may be waiting for this very core.
  for (int spin = 1; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    SPECULA_PAUSE();
    if (spin % 128 == 0) sched_yield();
  }
  job_ = nullptr;
  std::exception_ptr err = mine ? mine : std::exchange(worker_error_, nullptr);
  worker_error_ = nullptr;
  if (err) std::rethrow_exception(err);
}

void SpinBarrier::wait(int nth) {
  const int gen = gen_.load(std::memory_order_acquire);
  if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == nth) {
    count_.store(0, std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_release);
    return;
  }
  for (int spin = 1; gen_.load(std::memory_order_acquire) == gen; ++spin) {
    SPECULA_PAUSE();
    if (spin % 128 == 0) sched_yield();
  }
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 1; g == seen && spin < 50000; ++spin) {
      SPECULA_PAUSE();
      if (spin % 128 == 0) sched_yield();  // never starve a thread that shares this core
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    try {
      (*job_)(ith, n_threads_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!worker_error_) worker_error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace specula
