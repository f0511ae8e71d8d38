#pragma once

// The fused kernels' large scratch (packed K and V, dQ partials) outlives a call in a small
// process-wide pool, so that the next call of the same shape reuses it instead of faulting in and
// clearing fresh pages: the kernel's page clears were 8% of a sliding window's forward (T = 8192,
// H = 8, D = 64, 2 threads of the AMD EPYC Zen 3 VM, perf), where each call packed 32 MiB of K^T
// and V into new memory. At most kPoolBytes are kept; the oldest buffers are freed first, and
// qkv::release_cached_memory() (qkv/system.hpp) frees them all.

#include <cstddef>

namespace qkv::kernels::cpu {

constexpr std::size_t kPoolBytes = std::size_t{256} << 20;

// A pooled buffer of at least `bytes` and at most twice that (its size in *capacity), or null.
void* take_pooled(std::size_t bytes, std::size_t* capacity);
// Hands p (from std::aligned_alloc, `capacity` bytes) to the pool, which frees what passes
// kPoolBytes.
void give_pooled(void* p, std::size_t capacity) noexcept;

}  // namespace qkv::kernels::cpu
