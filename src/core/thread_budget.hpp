#pragma once

// The share of qkv's thread budget (qkv/system.hpp) that one call runs its OpenMP regions on.

namespace qkv::detail {

// For as long as it lives, the calling thread's OpenMP regions run on its share of
// num_threads() (at most `wanted`), taken from the budget when it is made and given back
// when it is destroyed. 1 inside an active parallel region, where it takes nothing. The calling
// thread's own OpenMP thread count is restored on destruction.
class ThreadShare {
 public:
  explicit ThreadShare(int wanted);
  ~ThreadShare();
  // The threads this share runs on: 1 to num_threads().
  int threads() const noexcept { return threads_; }
  ThreadShare(const ThreadShare&) = delete;
  ThreadShare& operator=(const ThreadShare&) = delete;

 private:
  int threads_ = 1;
  int saved_ = 1;         // the caller's omp_get_max_threads()
  bool counted_ = false;  // a call in flight, holding threads_ - 1 helpers of the budget
};

}  // namespace qkv::detail
