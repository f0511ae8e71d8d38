#pragma once

// Scratch of a few MiB and more (the kernels' packed K and V) in transparent huge pages where
// Linux offers them on request (/sys/kernel/mm/transparent_hugepage/enabled "madvise", as on the
// development VM): each call's fresh buffer then takes one page fault per 2 MiB instead of one
// per 4 KiB (a sliding-window forward, T = 8192, one thread of the Zen 3 VM: the kernel's page
// faults and clears fell from 6% of the profile to 3%). Only advice: where the kernel refuses or
// has no huge pages, the buffer is an ordinary one. Smaller buffers come from
// hwy::AllocateAligned as before.

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

#include "kernels/cpu/scratch_pool.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace qkv::kernels::cpu {

// Buffers of a huge page and more go back to the scratch pool (scratch_pool.hpp).
struct FreeLarge {
  std::size_t capacity = 0;
  void operator()(void* p) const noexcept {
    if (capacity >= kHugePage) {
      give_pooled(p, capacity);
    } else {
      std::free(p);
    }
  }
  static constexpr std::size_t kHugePage = std::size_t{1} << 21;
};

template <class T>
using LargeBuffer = std::unique_ptr<T[], FreeLarge>;

// n elements of T, uninitialized, aligned to 64 bytes (2 MiB from kHugePage bytes up, and then
// from the pool where it holds a buffer of the size).
template <class T>
LargeBuffer<T> allocate_large(std::size_t n) {
  constexpr std::size_t kHugePage = FreeLarge::kHugePage;
  const std::size_t bytes = std::max<std::size_t>(n * sizeof(T), 64);
  const std::size_t align = bytes >= kHugePage ? kHugePage : 64;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  if (align == kHugePage) {
    std::size_t capacity = 0;
    if (void* p = take_pooled(rounded, &capacity)) {
      return LargeBuffer<T>(static_cast<T*>(p), FreeLarge{capacity});
    }
  }
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advice: a refusal costs nothing
#endif
  return LargeBuffer<T>(static_cast<T*>(p), FreeLarge{rounded});
}

}  // namespace qkv::kernels::cpu
