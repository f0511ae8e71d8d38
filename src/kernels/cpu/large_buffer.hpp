#pragma once

// Scratch of a few MiB and more (the kernels' packed K and V): memory from core/pages.hpp, in
// transparent huge pages where Linux offers them on request, so that each call's fresh buffer takes
// one page fault per 2 MiB instead of one per 4 KiB (a sliding-window forward, T = 8192, one thread
// of the Zen 3 VM: the kernel's page faults and clears fell from 6% of the profile to 3%), and
// buffers of a huge page and more are pooled between calls (scratch_pool.hpp). Smaller ones come
// from the tensors' block cache (core/block_cache.hpp): from glibc, each call's K^T, V and row
// copies of a few hundred KiB were fresh pages, faulted in and cleared (attention of a training
// step at B 32, T 15, 4 heads of 32: page faults were a fifth of its backward, 2 threads of an
// Intel Xeon with AMX, 2026-11-27, perf).

#include <cstddef>
#include <cstdlib>
#include <memory>

#include "core/block_cache.hpp"
#include "core/pages.hpp"
#include "kernels/cpu/scratch_pool.hpp"

namespace qkv::kernels::cpu {

// Back to the scratch pool (scratch_pool.hpp) or the block cache, whichever gave the buffer.
struct FreeLarge {
  std::size_t capacity = 0;
  bool from_pool = false;
  void operator()(void* p) const noexcept {
    if (from_pool) {
      give_pooled(p, capacity);
    } else {
      detail::give_block(p, capacity);
    }
  }
};

template <class T>
using LargeBuffer = std::unique_ptr<T[], FreeLarge>;

// n elements of T, uninitialized, aligned to 64 bytes (2 MiB from kHugePage bytes up, and then
// from the pool where it holds a buffer of the size; below, from the block cache).
template <class T>
LargeBuffer<T> allocate_large(std::size_t n) {
  const std::size_t bytes = n * sizeof(T);
  std::size_t capacity = 0;
  if (bytes < detail::kHugePage) {
    void* p = detail::take_block(bytes, &capacity);
    return LargeBuffer<T>(static_cast<T*>(p), FreeLarge{capacity, false});
  }
  const std::size_t rounded =
      (bytes + detail::kHugePage - 1) / detail::kHugePage * detail::kHugePage;
  if (void* p = take_pooled(rounded, &capacity)) {
    return LargeBuffer<T>(static_cast<T*>(p), FreeLarge{capacity, true});
  }
  void* p = detail::allocate_pages(bytes, &capacity);
  note_fresh(capacity);
  return LargeBuffer<T>(static_cast<T*>(p), FreeLarge{capacity, true});
}

}  // namespace qkv::kernels::cpu
