#pragma once

// What the OpenMP parallel regions started in this test executable looked like: how many threads
// each team had, and how many threads the regions running at once had besides their calling
// threads. The probe sits between the compiled code and libgomp (the executable is linked with
// -Wl,--wrap=GOMP_parallel, so every region of qkv's kernels and of the tests goes through it);
// builds on another OpenMP runtime (LLVM's libomp, the tsan preset) have no probe.

namespace qkv::testing {

struct TeamStats {
  int regions = 0;          // outermost regions (level 1) started
  int max_team = 0;         // the largest team of an outermost region
  int max_helpers = 0;      // most threads that outermost regions ran at once besides their callers
  int nested_regions = 0;   // regions started inside another active or inactive region
  int max_nested_team = 0;  // the largest team of those
};

// Whether this build records regions (libgomp) or not (another runtime).
bool team_probe_available();

// Starts recording afresh.
void reset_team_stats();

// What was recorded since the last reset_team_stats().
TeamStats team_stats();

// The next outermost region to start, once its team is recorded, waits before its body until
// release_held_region(); region_held() tells when it does. A call in it stays in flight,
// holding its threads, for as long as the test needs.
void hold_next_region();
bool region_held();
void release_held_region();

}  // namespace qkv::testing
