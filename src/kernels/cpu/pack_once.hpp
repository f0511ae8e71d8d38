#pragma once

// Packing K and V tiles on first use. A kernel call packs every tile it reads exactly once, by
// the first thread that needs it, just before that thread's products read it from the cache.
// Packing a whole head up front (as the kernels did) costs the same work, but a sparse mask reads
// each tile for a few q-blocks only, so the tile had left the cache by then: packing was 18% of a
// sliding window's forward (T = 8192, one thread of the AMD EPYC Zen 3 VM, perf) and the tiles it
// never reads were packed too (a key range past the mask's reach, the rows past a length).
// Packing is a pure function of the inputs, so which thread packs a tile changes no result.

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

namespace qkv::kernels::cpu {

class PackOnce {
 public:
  // Flags for `tiles` tiles, none packed.
  explicit PackOnce(std::int64_t tiles)
      : state_(std::make_unique<std::atomic<std::uint8_t>[]>(static_cast<std::size_t>(tiles))) {
    for (std::int64_t t = 0; t < tiles; ++t) state_[t].store(kEmpty, std::memory_order_relaxed);
  }

  // Runs pack(t) for tile t if no thread has; returns once the tile is packed (waiting for the
  // thread that packs it, if another one does). While it waits, it first runs pack(ahead) if
  // ahead >= 0 and no thread has started that tile: the caller's next tile, so that two threads
  // needing the same tiles in the same order share the packing instead of one waiting for every
  // tile the other packs. pack must not throw.
  template <class Pack>
  void ensure(std::int64_t t, std::int64_t ahead, Pack&& pack) const {
    std::atomic<std::uint8_t>& state = state_[t];
    if (state.load(std::memory_order_acquire) == kReady) return;
    if (try_run(t, [&] { pack(t); })) return;
    if (ahead >= 0) try_run(ahead, [&] { pack(ahead); });
    // Another thread packs it: a tile takes microseconds, but that thread may lose its core on a
    // shared host, so yield rather than spin.
    while (state.load(std::memory_order_acquire) != kReady) std::this_thread::yield();
  }
  // pack() for tile t as above, without a tile ahead.
  template <class Pack>
  void ensure(std::int64_t t, Pack&& pack) const {
    ensure(t, -1, [&](std::int64_t) { pack(); });
  }

 private:
  // Runs pack() for tile t if no thread has started it (true), else returns at once (false).
  template <class Pack>
  bool try_run(std::int64_t t, Pack&& pack) const {
    std::atomic<std::uint8_t>& state = state_[t];
    std::uint8_t expected = kEmpty;
    if (state.load(std::memory_order_relaxed) != kEmpty ||
        !state.compare_exchange_strong(expected, kBusy, std::memory_order_acquire)) {
      return false;
    }
    pack();
    state.store(kReady, std::memory_order_release);
    return true;
  }

  static constexpr std::uint8_t kEmpty = 0, kBusy = 1, kReady = 2;
  std::unique_ptr<std::atomic<std::uint8_t>[]> state_;
};

}  // namespace qkv::kernels::cpu
