#pragma once

// Element and row loops of the ops over qkv's threads, in chunks fixed by the sizes alone.
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

// Rows per chunk for rows of n elements: kChunkElements' worth, at least one.
inline std::int64_t rows_per_chunk(std::int64_t n) {
  return std::max<std::int64_t>(1, kChunkElements / std::max<std::int64_t>(n, 1));
}

}  // namespace qkv::ops
