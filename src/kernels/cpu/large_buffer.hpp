#pragma once

// Scratch of a few MiB and more (the kernels' packed K and V): memory from core/pages.hpp, in
// transparent huge pages where Linux offers them on request, so that each call's fresh buffer takes
// one page fault per 2 MiB instead of one per 4 KiB (a sliding-window forward, T = 8192, one thread
// of the Zen 3 VM: the kernel's page faults and clears fell from 6% of the profile to 3%), and
// buffers of a huge page and more are pooled between calls (scratch_pool.hpp). Smaller buffers
// come from hwy::AllocateAligned as before.

#include <cstddef>
#include <cstdlib>
#include <memory>

#include "core/pages.hpp"
#include "kernels/cpu/scratch_pool.hpp"

namespace qkv::kernels::cpu {

// Buffers of a huge page and more go back to the scratch pool (scratch_pool.hpp).
struct FreeLarge {
  std::size_t capacity = 0;
  void operator()(void* p) const noexcept {
    if (capacity >= detail::kHugePage) {
      give_pooled(p, capacity);
    } else {
      std::free(p);
    }
  }
};

template <class T>
using LargeBuffer = std::unique_ptr<T[], FreeLarge>;

// n elements of T, uninitialized, aligned to 64 bytes (2 MiB from kHugePage bytes up, and then
// from the pool where it holds a buffer of the size).
template <class T>
LargeBuffer<T> allocate_large(std::size_t n) {
  const std::size_t bytes = n * sizeof(T);
  if (bytes >= detail::kHugePage) {
    const std::size_t rounded =
        (bytes + detail::kHugePage - 1) / detail::kHugePage * detail::kHugePage;
    std::size_t capacity = 0;
    if (void* p = take_pooled(rounded, &capacity)) {
      return LargeBuffer<T>(static_cast<T*>(p), FreeLarge{capacity});
    }
  }
  std::size_t capacity = 0;
  void* p = detail::allocate_pages(bytes, &capacity);
  if (capacity >= detail::kHugePage) note_fresh(capacity);
  return LargeBuffer<T>(static_cast<T*>(p), FreeLarge{capacity});
}

}  // namespace qkv::kernels::cpu
