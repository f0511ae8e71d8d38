#pragma once

// Tensors' memory from 64 KiB up is kept after the last tensor using it goes away, in size
// classes (eight per power of two), for the next tensor of the class or of a class up to a
// quarter smaller: a training step allocates
// and frees the same few hundred temporaries (activations, gradients, their sums) every step, and
// from glibc each was fresh memory that the kernel faulted in and cleared page by page, or a block
// mapped and unmapped (qkv demo's translator, 2 threads of an Intel Xeon with AMX, 2026-11-27: the
// page faults were 8% of a training step, malloc another 4.6%). At most kCacheBytes are kept,
// the blocks freed longest ago released first; qkv::release_cached_memory() releases them all.
// Under AddressSanitizer nothing is kept, so that a use after free is still reported.

#include <cstddef>

namespace qkv::detail {

inline constexpr std::size_t kCacheBytes = std::size_t{256} << 20;

// At least `bytes` (0 counts as 1) of uninitialized memory, aligned as allocate_pages aligns it;
// *capacity receives the size reserved. Give it back with give_block. Throws std::bad_alloc.
void* take_block(std::size_t bytes, std::size_t* capacity);
// p from take_block with its capacity: kept for a later take_block of its class, or freed.
void give_block(void* p, std::size_t capacity) noexcept;
// Frees every kept block.
void release_blocks() noexcept;

}  // namespace qkv::detail
