// Allocation with huge-page advice (core/pages.hpp).
#include "core/pages.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace qkv::detail {

void* allocate_pages(std::size_t bytes, std::size_t* capacity) {
  constexpr std::size_t kLine = 64;
  const std::size_t wanted = std::max<std::size_t>(bytes, 1);
  const std::size_t align = wanted >= kHugePage ? kHugePage : kLine;
  if (wanted > static_cast<std::size_t>(-1) - align) throw std::bad_alloc();
  const std::size_t rounded = (wanted + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advice: a refusal costs nothing
#endif
  if (capacity != nullptr) *capacity = rounded;
  return p;
}

}  // namespace qkv::detail
