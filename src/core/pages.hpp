#pragma once

// Memory for tensors and the kernels' large scratch, with transparent huge pages for large blocks.
// From kHugePage bytes up a block is aligned to 2 MiB and advised MADV_HUGEPAGE, so that where
// Linux offers huge pages on request (/sys/kernel/mm/transparent_hugepage/enabled "madvise", as
// on the development VMs) one TLB entry covers 2 MiB instead of 4 KiB, and a fresh block takes one
// page fault per 2 MiB. Kernels that stride through big q, k, v and out tensors a few rows per
// tile miss the TLB far less: measured on an Intel Xeon (AVX-512, AMX; 2-core VM, 2 threads,
// 2026-11-27) with glibc's equivalent switch on the whole process (GLIBC_TUNABLES=
// glibc.malloc.hugetlb=1), alternated with it off: a sliding window's forward (T = 8192, H = 8,
// D = 64, f32) over full x kept tiles 1.61 -> 1.54 and 1.60 -> 1.52; decode (H = 8, D = 128, f32,
// 15 reps) 11.8 11.3 12.1 -> 13.1 12.0 13.5 GFLOP/s at 16384 keys, 10.4 10.2 10.5 -> 10.7 10.6 11.3
// at 65536. Only advice: where the kernel refuses or has no huge pages, the block is an ordinary
// one.

#include <cstddef>

namespace qkv::detail {

inline constexpr std::size_t kHugePage = std::size_t{1} << 21;

// At least `bytes` (0 counts as 1) of uninitialized memory, 64-byte aligned, or 2 MiB aligned with
// huge-page advice from kHugePage bytes up; *capacity (if given) receives the size reserved. Free
// it with std::free. Throws std::bad_alloc.
void* allocate_pages(std::size_t bytes, std::size_t* capacity = nullptr);

}  // namespace qkv::detail
