#pragma once

// The fused kernels' large scratch (packed K and V, dQ partials) and the attention calls' staged
// copies (attention/run.hpp) outlive a call in a process-wide pool, so that the next call of the
// same shape reuses them instead of faulting in and clearing fresh pages: the kernel's page clears
// were 8% of a sliding window's forward (T = 8192, H = 8, D = 64, 2 threads of the AMD EPYC Zen 3
// VM, perf), where each call packed 32 MiB of K^T and V into new memory.
//
// What it keeps: up to kPoolBytes, or as much as was in use at once during the last busy period
// (from a first buffer handed out to the moment none is out) where that was more, so a call that
// needs more than kPoolBytes reuses its own memory next time instead of churning it (a bf16
// backward at T 4096, H 8, D 128 holds about 280 MiB at once: with a fixed 256 MiB, each call
// faulted in 100 huge pages). Memory in use and kept never passes that limit together: a buffer
// the pool cannot give makes it free its oldest first, so keeping adds nothing to a call's peak
// beyond the last call's. qkv::release_cached_memory() (qkv/system.hpp) frees it all.

#include <cstddef>

namespace qkv::kernels::cpu {

constexpr std::size_t kPoolBytes = std::size_t{256} << 20;

// A pooled buffer of at least `bytes` and at most twice that (its size in *capacity), or null;
// on null the caller allocates the buffer itself and reports it with note_fresh.
void* take_pooled(std::size_t bytes, std::size_t* capacity);
// A buffer of `capacity` bytes the caller allocated itself after take_pooled gave none: counted as
// in use, and first room made for it by freeing kept buffers, oldest first.
void note_fresh(std::size_t capacity) noexcept;
// Hands p (from std::aligned_alloc, `capacity` bytes, from take_pooled or noted fresh) back: the
// pool keeps it or frees what passes its limit.
void give_pooled(void* p, std::size_t capacity) noexcept;

}  // namespace qkv::kernels::cpu
