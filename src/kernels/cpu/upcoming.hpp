#pragma once

// Rows a kernel will soon read from memory or write to it, asked of the cache a few lines at a
// time between the rows of its tiles' softmax, so that the misses overlap the products. Out of
// cache, a window's backward k-block waited on them: packing the rows of its new q-block (Q, dO,
// O read 2 KiB apart in [B, T, H, D]) took ~12k TSC ticks, packing its K and V tiles ~10k, writing
// its dK and dV rows ~6k, against ~30k for each of its 5 tiles; asked for early, ~5k, ~7.5k and
// ~2.3k (rdtsc, T = 8192, H = 8, D = 64, 2 threads, AMD EPYC (avx2 avx512_bf16 avx512f),
// 2026-11-28). In bursts (a whole stream at once) the requests queued behind the core's few
// outstanding misses and stalled the tile instead; asked for a k-block ahead, the q-block's rows
// were evicted before use (every row of a head falls in the same 128 of L2's 1024 sets). Used by
// flash_bwd.cpp and flash_fwd.cpp, which record what it gained beside their use.

#include <cstdint>

#include "hwy/cache_control.h"

namespace qkv::kernels::cpu {

class Upcoming {
 public:
  // rows of `bytes` bytes from `first`, row_stride bytes apart; write: to be written.
  void add(const void* first, std::int64_t row_stride, std::int64_t rows, std::int64_t bytes,
           bool write) {
    if (count_ == kMaxStreams || rows <= 0 || first == nullptr) return;
    streams_[count_++] = {static_cast<const char*>(first), row_stride, rows, bytes, write};
    lines_ += rows * ((bytes + 63) / 64);
  }
  std::int64_t lines() const { return lines_; }
  // Spreads the lines over `steps` calls of step() (none: nothing to spread them over).
  void pace(std::int64_t steps) { per_step_ = steps > 0 ? (lines_ + steps - 1) / steps : 0; }
  void step() { fetch(per_step_); }
  // The next n lines, stream by stream in the order added.
  void fetch(std::int64_t n) {
    for (; n > 0 && at_ < count_; --n) {
      const Stream& s = streams_[at_];
      const char* line = s.first + row_ * s.stride + byte_;
      if (s.write) {
        __builtin_prefetch(line, 1);
      } else {
        hwy::Prefetch(line);
      }
      if ((byte_ += 64) < s.bytes) continue;
      byte_ = 0;
      if (++row_ < s.rows) continue;
      row_ = 0;
      ++at_;
    }
  }

 private:
  struct Stream {
    const char* first;
    std::int64_t stride, rows, bytes;
    bool write;
  };
  static constexpr int kMaxStreams = 16;
  Stream streams_[kMaxStreams] = {};
  int count_ = 0, at_ = 0;
  std::int64_t row_ = 0, byte_ = 0, lines_ = 0, per_step_ = 0;
};

}  // namespace qkv::kernels::cpu
