#pragma once

// Element and row loops of the ops over qkv's threads, in chunks fixed by the sizes alone.
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/thread_budget.hpp"
#include "qkv/system.hpp"

namespace qkv::ops {

// Elements per chunk of an element-by-element op, and the most elements a row loop's chunk
// covers: 2^15 (128 KiB of f32). A training step of qkv demo's translator ran its adds, layer
// norms and relus on one thread while the other waited: 44% of the second thread's time was
// spent in OpenMP's wait (perf, 2 threads of an Intel Xeon with AMX, 2026-11-28); the [448, 128]
// activations of a batch split in two chunks.
inline constexpr std::int64_t kChunkElements = std::int64_t{1} << 15;

// fn(begin, end) over [0, n) in chunks of `chunk` (the last shorter): on this call's share of
// qkv::num_threads() when there are two chunks or more, else on the calling thread. The chunks
// follow from n and chunk alone, so partial results combined per chunk do not depend on the
// thread count. fn must not throw.
template <class Fn>
void for_chunks(std::int64_t n, std::int64_t chunk, Fn&& fn) {
  const std::int64_t chunks = n <= 0 ? 0 : (n + chunk - 1) / chunk;
  if (chunks <= 1 || num_threads() == 1) {
    for (std::int64_t c = 0; c < chunks; ++c) fn(c * chunk, std::min(n, (c + 1) * chunk));
    return;
  }
  const detail::ThreadShare share(num_threads());
#pragma omp parallel for schedule(static) num_threads(share.threads())
  for (std::int64_t c = 0; c < chunks; ++c) fn(c * chunk, std::min(n, (c + 1) * chunk));
}

// fn(begin, end) over [0, n) in one contiguous piece per thread of this call's share of
// qkv::num_threads(), the pieces' bounds at multiples of `align`, when n holds more than `serial`
// items (kChunkElements' worth, as for_chunks' two chunks), else on the calling thread. For loops
// whose every result is its own item's (element by element, row by row, column by column), where
// the split cannot change a bit: equal pieces where for_chunks' fixed chunks leave one thread
// waiting (a [448, 128] batch's 2^15 + 24576 elements, a [448, 512] one's 4 chunks against 3).
// Loops that sum across items keep for_chunks. fn must not throw.
template <class Fn>
void for_range(std::int64_t n, std::int64_t serial, std::int64_t align, Fn&& fn) {
  if (n <= 0) return;
  if (n <= serial || num_threads() == 1) {
    fn(std::int64_t{0}, n);
    return;
  }
  const detail::ThreadShare share(num_threads());
  const std::int64_t units = (n + align - 1) / align;
#pragma omp parallel num_threads(share.threads())
  {
    const std::int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    const std::int64_t begin = std::min(n, units * t / team * align);
    const std::int64_t end = std::min(n, units * (t + 1) / team * align);
    if (begin < end) fn(begin, end);
  }
}

// Rows per chunk for rows of n elements: kChunkElements' worth, at least one.
inline std::int64_t rows_per_chunk(std::int64_t n) {
  return std::max<std::int64_t>(1, kChunkElements / std::max<std::int64_t>(n, 1));
}

}  // namespace qkv::ops
