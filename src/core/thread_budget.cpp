#include "core/thread_budget.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "qkv/error.hpp"
#include "qkv/system.hpp"

namespace qkv {
namespace {

// num_threads(): OpenMP's count on the thread that first asks (OMP_NUM_THREADS, else the CPUs),
// until set_num_threads.
std::atomic<int>& budget() {
  static std::atomic<int> threads{omp_get_max_threads()};
  return threads;
}

// The calls in flight that draw on the budget, and the threads they run besides their own calling
// threads (the sum of threads() - 1): the budget bounds the second by num_threads() - 1. Counts
// only, ordering nothing else, so relaxed: acquire-release operations on them would order every
// call after the previous ones, and ThreadSanitizer would no longer see a race between calls.
std::atomic<int> calls_in_flight{0};
std::atomic<int> helpers_in_use{0};
constexpr auto kRelaxed = std::memory_order_relaxed;

}  // namespace

void set_num_threads(int n) {
  if (n < 1) throw Error("n", "at least 1 thread", std::to_string(n));
  budget().store(n, kRelaxed);
}

int num_threads() { return budget().load(kRelaxed); }

namespace detail {

ThreadShare::ThreadShare(int wanted) : saved_(omp_get_max_threads()) {
  // In the caller's active parallel region its threads are busy already: more would
  // oversubscribe the CPUs, so the call runs on its calling thread (what libgomp does anyway
  // for nested regions unless the caller raised omp_set_max_active_levels).
  if (!omp_in_parallel()) {
    const int in_flight = calls_in_flight.fetch_add(1, kRelaxed) + 1;
    counted_ = true;
    const int total = num_threads();
    const int fair = std::max(1, std::min(wanted, total / in_flight));
    int used = helpers_in_use.load(kRelaxed);
    int helpers = 0;
    do {
      helpers = std::clamp(total - 1 - used, 0, fair - 1);
    } while (!helpers_in_use.compare_exchange_weak(used, used + helpers, kRelaxed));
    threads_ = 1 + helpers;
  }
  omp_set_num_threads(threads_);
}

ThreadShare::~ThreadShare() {
  omp_set_num_threads(saved_);
  if (counted_) {
    helpers_in_use.fetch_sub(threads_ - 1, kRelaxed);
    calls_in_flight.fetch_sub(1, kRelaxed);
  }
}

}  // namespace detail
}  // namespace qkv
