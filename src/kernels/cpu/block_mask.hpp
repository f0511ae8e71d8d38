#pragma once

// Which (q-block, k-block) tiles the built-in masks leave empty, full or partial, computed from
// the structure of the masks (lengths, causal, window) rather than element by element: empty
// tiles are skipped, full tiles skip the per-element mask.

#include <algorithm>
#include <cstdint>

#include "kernels/mods.hpp"

namespace qkv::kernels::cpu {

enum class TileKind : std::uint8_t { empty, partial, full };

struct Range {
  std::int64_t lo = 0;
  std::int64_t hi = 0;  // exclusive
  bool empty() const noexcept { return lo >= hi; }
};

// The keys [lo, hi) that some row in [i0, i1) of batch b may keep; every other key is dropped
// for all of these rows. The band structure makes each row's keys one interval, and the rows'
// intervals move monotonically, so their union is one interval too.
inline Range key_range(const BuiltinMask& m, std::int64_t b, std::int64_t i0, std::int64_t i1) {
  const std::int64_t tq = m.lengths.tq(b);
  const std::int64_t tk = m.lengths.tk(b);
  i1 = std::min(i1, tq);
  if (i0 >= i1) return {0, 0};
  const std::int64_t offset = tk - tq;  // row i's bottom-right diagonal is i + offset
  Range r{0, tk};
  if (m.causal == Causal::top_left) r.hi = std::min(r.hi, i1);
  if (m.causal == Causal::bottom_right) r.hi = std::min(r.hi, i1 + offset);
  if (m.window_right >= 0) r.hi = std::min(r.hi, i1 + offset + m.window_right);
  if (m.window_left >= 0) r.lo = std::max(r.lo, i0 + offset - m.window_left);
  return r;
}

// The rows [lo, hi) of batch b that may keep some key in [j0, j1).
inline Range query_range(const BuiltinMask& m, std::int64_t b, std::int64_t j0, std::int64_t j1) {
  const std::int64_t tq = m.lengths.tq(b);
  const std::int64_t tk = m.lengths.tk(b);
  j1 = std::min(j1, tk);
  if (j0 >= j1) return {0, 0};
  const std::int64_t offset = tk - tq;
  Range r{0, tq};
  if (m.causal == Causal::top_left) r.lo = std::max(r.lo, j0);
  if (m.causal == Causal::bottom_right) r.lo = std::max(r.lo, j0 - offset);
  if (m.window_right >= 0) r.lo = std::max(r.lo, j0 - offset - m.window_right);
  if (m.window_left >= 0) r.hi = std::min(r.hi, j1 - offset + m.window_left);
  return r;
}

// The kind of tile rows [i0, i1) x keys [j0, j1) of batch b.
inline TileKind classify(const BuiltinMask& m, std::int64_t b, std::int64_t i0, std::int64_t i1,
                         std::int64_t j0, std::int64_t j1) {
  const Range keys = key_range(m, b, i0, i1);
  if (std::max(keys.lo, j0) >= std::min(keys.hi, j1)) return TileKind::empty;
  const std::int64_t tq = m.lengths.tq(b);
  const std::int64_t tk = m.lengths.tk(b);
  const std::int64_t offset = tk - tq;
  const bool full = !m.keep && i1 <= tq && j1 <= tk &&
                    (m.causal != Causal::top_left || j1 - 1 <= i0) &&
                    (m.causal != Causal::bottom_right || j1 - 1 <= i0 + offset) &&
                    (m.window_right < 0 || j1 - 1 <= i0 + offset + m.window_right) &&
                    (m.window_left < 0 || j0 >= i1 - 1 + offset - m.window_left);
  return full ? TileKind::full : TileKind::partial;
}

}  // namespace qkv::kernels::cpu
