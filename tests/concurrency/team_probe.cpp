#include "concurrency/team_probe.hpp"

#include <omp.h>

#include <atomic>
#include <thread>

namespace qkv::testing {
namespace {

std::atomic<int> regions{0}, max_team{0}, max_helpers{0}, nested_regions{0}, max_nested_team{0};

#ifdef QKV_TEAM_PROBE
std::atomic<int> helpers{0};  // the helpers of the outermost regions running now
std::atomic<bool> hold_requested{false}, held{false}, released{false};

void raise_to(std::atomic<int>& max, int value) {
  int seen = max.load();
  while (seen < value && !max.compare_exchange_weak(seen, value)) {
  }
}

// One region's body and what its team looked like, filled in by its thread 0.
struct Region {
  void (*body)(void*);
  void* data;
  int helpers = 0;  // team size - 1 of an outermost region, counted in `helpers` while it runs
};

// Every thread of the team runs this in place of the region's body. Thread 0 is the thread that
// started the region; it records the team before the body runs.
void probed_body(void* arg) {
  Region& region = *static_cast<Region*>(arg);
  if (omp_get_thread_num() == 0) {
    const int team = omp_get_num_threads();
    if (omp_get_level() == 1) {
      regions.fetch_add(1);
      raise_to(max_team, team);
      region.helpers = team - 1;
      raise_to(max_helpers, helpers.fetch_add(region.helpers) + region.helpers);
      if (hold_requested.exchange(false)) {
        held.store(true);
        while (!released.load()) std::this_thread::yield();
        held.store(false);
      }
    } else {
      nested_regions.fetch_add(1);
      raise_to(max_nested_team, team);
    }
  }
  region.body(region.data);
}
#endif

}  // namespace

#ifdef QKV_TEAM_PROBE
extern "C" void __real_GOMP_parallel(void (*body)(void*), void* data, unsigned num_threads,
                                     unsigned flags);

// The wrapped entry point of `#pragma omp parallel` (GCC's libgomp ABI): the same region, with
// the probe around its body.
extern "C" void __wrap_GOMP_parallel(void (*body)(void*), void* data, unsigned num_threads,
                                     unsigned flags) {
  Region region{body, data};
  __real_GOMP_parallel(probed_body, &region, num_threads, flags);
  helpers.fetch_sub(region.helpers);
}

bool team_probe_available() { return true; }

void hold_next_region() {
  released.store(false);
  hold_requested.store(true);
}

bool region_held() { return held.load(); }

void release_held_region() { released.store(true); }
#else
bool team_probe_available() { return false; }
void hold_next_region() {}
bool region_held() { return false; }
void release_held_region() {}
#endif

void reset_team_stats() {
  for (std::atomic<int>* counter :
       {&regions, &max_team, &max_helpers, &nested_regions, &max_nested_team}) {
    counter->store(0);
  }
}

TeamStats team_stats() {
  return {regions.load(), max_team.load(), max_helpers.load(), nested_regions.load(),
          max_nested_team.load()};
}

}  // namespace qkv::testing
