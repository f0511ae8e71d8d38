// The fused forward: tiled online softmax. For each (b, h, q-block) the score tile S = (scale Q)
// K^T of one k-block at a time is turned into probabilities against a running row max, the output
// accumulator is rescaled when the max moves, and one division at the end normalizes it. The
// Tq x Tk matrix never exists; lse is saved for the backward.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/flash_fwd.cpp"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/block_view.hpp"
#include "kernels/cpu/entry.hpp"
#include "kernels/cpu/gemm-inl.h"
#include "kernels/cpu/pack.hpp"
#include "kernels/cpu/tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

constexpr std::int64_t kBq = TileTraits::kForwardBlockQ;  // the most rows of a q-block

// The online-softmax state of a set of rows: running max m, running sum l and the unnormalized
// output accumulator acc [rows, Dv].
template <class T>
struct SoftmaxState {
  T* acc = nullptr;
  T* m = nullptr;
  T* l = nullptr;

  void reset(std::int64_t rows, std::int64_t dim_v) const {
    std::fill(acc, acc + rows * dim_v, T(0));
    std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
    std::fill(l, l + rows, T(0));
  }
  SoftmaxState rows_from(std::int64_t row, std::int64_t dim_v) const {
    return {acc + row * dim_v, m + row, l + row};
  }
};

// Per-thread scratch of the forward: score tiles and dropout factors for `rows` rows of kBk keys,
// the rows of scale * Q [rows, D], and softmax state for the same rows.
template <class T>
struct ForwardScratch {
  hwy::AlignedFreeUniquePtr<T[]> s, z, q, acc, m, l;
  ForwardScratch(std::int64_t rows, std::int64_t dim, std::int64_t dim_v)
      : s(hwy::AllocateAligned<T>(rows * kBk)),
        z(hwy::AllocateAligned<T>(rows * kBk)),
        q(hwy::AllocateAligned<T>(std::max<std::int64_t>(rows * dim, 1))),
        acc(hwy::AllocateAligned<T>(rows * dim_v)),
        m(hwy::AllocateAligned<T>(rows)),
        l(hwy::AllocateAligned<T>(rows)) {}
  SoftmaxState<T> state() { return {acc.get(), m.get(), l.get()}; }
};

// One tile of the online softmax for rows [i0, i0 + live) of head h of batch b, whose scores
// against keys [j0, j0 + cols) are in s [live, kBk] (scale * q . k, before the mods). Turns them
// into P against the running row max (times the dropout factors z [live, kBk] when dropout is
// on), rescales what acc holds when a row's max moves, and adds the row sums into l. The caller
// then adds P V into acc.
template <class T, class ScoreMod, class MaskMod>
void softmax_tile(const Problem<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t h,
                  std::int64_t i0, std::int64_t live, std::int64_t j0, std::int64_t cols,
                  const TileKind* kinds, T* s, T* z, const SoftmaxState<T>& state) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const std::int64_t dim_v = p.dims.Dv;
  score_tile(p, b, h, i0, live, j0, cols, kinds, s, static_cast<T*>(nullptr));
  if (p.dropout.enabled()) dropout_tile(p, b, h, i0, live, j0, cols, z);
  // The new row maxima first, then every row's rescaling factor alpha = exp(m_old - m_new) in
  // one vector pass (a libm call per row took 1.6% of the forward), over the live rows rounded up
  // to whole vectors.
  alignas(64) T m_new[kBq];
  alignas(64) T alpha[kBq];
  const std::int64_t vector_rows =
      round_up(live, static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<T>())));
  for (std::int64_t r = 0; r < vector_rows; ++r) {
    m_new[r] = r < live ? std::max(state.m[r], row_max(s + r * kBk)) : T(0);
    alpha[r] = r < live && state.m[r] != kNegInf ? state.m[r] - m_new[r] : T(0);
  }
  exp_rows(alpha, vector_rows);
  for (std::int64_t r = 0; r < live; ++r) {
    T* row = s + r * kBk;
    if (m_new[r] == kNegInf) {
      // Nothing kept in this row yet, or only -inf and NaN scores (whether the max returns
      // a NaN depends on the target). A NaN
      // must reach the row (docs/numerics.md): it poisons the row sum. -inf scores alone leave
      // the row as if masked.
      if (std::any_of(row, row + kBk, [](T x) { return x != kNegInf; })) {
        state.l[r] = std::numeric_limits<T>::quiet_NaN();
      }
      std::fill(row, row + kBk, T(0));
      continue;
    }
    // Online softmax: rescale what was accumulated against the old max (a row that kept nothing
    // before has nothing to rescale).
    const T factor = state.m[r] == kNegInf ? T(0) : alpha[r];
    const T row_sum = row_exp(row, m_new[r]);
    state.l[r] = state.l[r] * factor + row_sum;
    state.m[r] = m_new[r];
    if (factor != T(1)) scale_row(state.acc + r * dim_v, dim_v, factor);
    // Dropout scales what reaches V, not the normalizer (lse is not affected).
    if (p.dropout.enabled()) row_mul(row, z + r * kBk);
  }
}

// acc [live, Dv] += P V over the pairs the mask keeps only, for rows [i0, i0 + live) of head h
// and keys [j0, j0 + cols) of batch b, with P [live, kBk] and this tile of V [kBk, Dv]. For
// partial tiles whose V holds an inf or NaN: the product would add 0 * NaN = NaN into the rows
// that drop the key.
template <class T, class ScoreMod, class MaskMod>
void values_kept(const Problem<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t h,
                 std::int64_t i0, std::int64_t live, std::int64_t j0, std::int64_t cols, const T* P,
                 const T* v, T* acc) {
  const std::int64_t dim_v = p.dims.Dv;
  for (std::int64_t r = 0; r < live; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      if (p.mask_mod(b, h, i0 + r, j0 + c))
        axpy(P[r * kBk + c], v + c * dim_v, acc + r * dim_v, dim_v);
    }
  }
}

// Folds every key into `state`, the online-softmax state of rows [i0, i0 + live) of head h of
// batch b, from one head's K^T and V packed in tiles (kt: [D, kBk] per tile, vt: [kBk, Dv] per
// tile; v_finite: per tile, whether V holds only finite numbers). Tiles the mask empties are
// skipped.
template <class T, class ScoreMod, class MaskMod>
void attend_keys(const Problem<T, ScoreMod, MaskMod>& p, const T* kt, const T* vt,
                 const std::uint8_t* v_finite, std::int64_t b, std::int64_t h, std::int64_t i0,
                 std::int64_t live, ForwardScratch<T>& scratch, const SoftmaxState<T>& state) {
  const Dims& d = p.dims;
  if (live == 0) return;
  T* q = scratch.q.get();  // scale * Q of these rows, [live, D]
  scale_rows(p.q + ((b * d.Tq + i0) * d.Hq + h) * d.D, d.Hq * d.D, live, d.D, p.scale, q);
  // The block mask's q-blocks in these rows (a forward block is one or two of them), and the
  // k-blocks any of them needs.
  const BlockView blocks(p.blocks);
  const std::int64_t qb0 = i0 / TileTraits::kBlockQ;
  const std::int64_t halves = std::max<std::int64_t>(
      1, (std::max<std::int64_t>(live, 1) + TileTraits::kBlockQ - 1) / TileTraits::kBlockQ);
  KeyRange span{blocks.k_span(b, h, qb0)};
  for (std::int64_t x = 1; x < halves; ++x) {
    const KeyRange more = blocks.k_span(b, h, qb0 + x);
    if (more.empty()) continue;
    span = span.empty() ? more : KeyRange{std::min(span.lo, more.lo), std::max(span.hi, more.hi)};
  }
  TileKind kinds[kBq / TileTraits::kBlockQ];
  for (std::int64_t kb = span.lo; kb < span.hi; ++kb) {
    const std::int64_t j0 = kb * kBk;
    const std::int64_t cols = std::min(kBk, d.Tk - j0);
    bool any = false, all_full = true;
    for (std::int64_t x = 0; x < halves; ++x) {
      kinds[x] = blocks.kind(b, h, qb0 + x, kb);
      any = any || kinds[x] != TileKind::empty;
      all_full = all_full && kinds[x] == TileKind::full;
    }
    if (!any) continue;
    T* s = scratch.s.get();
    // S = (scale Q) K^T for this tile (the pack's zero padding fills columns past Tk).
    gemm<true>(live, kBk, d.D, q, d.D, kt + j0 * d.D, kBk, s, kBk, false);
    softmax_tile(p, b, h, i0, live, j0, cols, kinds, s, scratch.z.get(), state);
    if (!all_full && !v_finite[kb]) {
      values_kept(p, b, h, i0, live, j0, cols, s, vt + j0 * d.Dv, state.acc);
    } else {
      gemm(live, d.Dv, cols, s, kBk, vt + j0 * d.Dv, d.Dv, state.acc, d.Dv, true);  // acc += P V
    }
  }
}

// out_i = acc_i / l_i and lse_i = m_i + log(l_i) for rows [i0, i0 + rows) of head h; rows past
// `live` (dropped whole by query_lengths) and rows that kept no key get out 0 and lse -inf.
template <class T>
void write_rows(const Dims& d, std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t rows,
                std::int64_t live, const T* acc, const T* m, const T* l, T* out, T* lse) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* o = out + ((b * d.Tq + i0 + r) * d.Hq + h) * d.Dv;
    const bool empty = r >= live || l[r] == T(0);
    const T inv = empty ? T(0) : T(1) / l[r];
    for (std::int64_t c = 0; c < d.Dv; ++c) o[c] = empty ? T(0) : acc[r * d.Dv + c] * inv;
    lse[(b * d.Hq + h) * d.Tq + i0 + r] =
        empty ? -std::numeric_limits<T>::infinity() : m[r] + std::log(l[r]);
  }
}

// Rows at or past batch b's query length (row_limit) are dropped whole.
template <class T, class ScoreMod, class MaskMod>
std::int64_t live_rows(const Problem<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t i0,
                       std::int64_t rows) {
  return std::clamp<std::int64_t>(row_limit(p.mask_mod, b) - i0, 0, rows);
}

// Prefill and training shapes: K^T packed once per (b, k/v head), work split over
// (b, h, q-block).
template <class T, class ScoreMod, class MaskMod>
void forward_tiled(const Problem<T, ScoreMod, MaskMod>& p, T* out, T* lse) {
  const Dims& d = p.dims;
  // K^T and V of every (b, k/v head) in tiles, shared by all q-blocks and all query heads of
  // the group: [B * Hk][tiles][D, kBk] and [B * Hk][tiles][kBk, Dv].
  const std::int64_t tk_pad = round_up(std::max<std::int64_t>(d.Tk, 1), kBk);
  auto kt = hwy::AllocateAligned<T>(static_cast<size_t>(d.B * d.Hk * d.D * tk_pad));
  auto vt = hwy::AllocateAligned<T>(static_cast<size_t>(d.B * d.Hk * d.Dv * tk_pad));
  // Per (b, k/v head) and tile, whether V holds only finite numbers.
  const std::int64_t tiles = tk_pad / kBk;
  std::vector<std::uint8_t> v_finite(static_cast<size_t>(d.B * d.Hk * tiles));
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < d.B * d.Hk; ++bh) {
    const std::int64_t b = bh / d.Hk;
    const std::int64_t hk = bh % d.Hk;
    pack_tiles_transposed(p.k + (b * d.Tk * d.Hk + hk) * d.D, d.Hk * d.D, d.Tk, d.D, kBk,
                          kt.get() + bh * d.D * tk_pad);
    T* v_head = vt.get() + bh * d.Dv * tk_pad;
    pack_tiles(p.v + (b * d.Tk * d.Hk + hk) * d.Dv, d.Hk * d.Dv, d.Tk, d.Dv, kBk, v_head);
    for (std::int64_t t = 0; t < tiles; ++t) {
      v_finite[bh * tiles + t] = all_finite(v_head + t * kBk * d.Dv, kBk * d.Dv);
    }
  }
  // A sparse mask (most tiles empty) keeps 64-row blocks: a 128-row block computes the union of
  // its two halves' tiles, and its K and V tiles fit the cache anyway (qkv bench --variants, T =
  // 8192, fwd, AMD EPYC Zen 3: bigbird's time over full x kept tiles was 2.06 with 128 rows).
  const bool sparse = 2 * p.blocks->counts[static_cast<int>(TileKind::empty)] >
                      static_cast<std::int64_t>(p.blocks->kinds.size());
  const std::int64_t block =
      sparse
          ? TileTraits::kBlockQ
          : TileTraits::forward_block_q(d.Tk * (d.D + d.Dv) * static_cast<std::int64_t>(sizeof(T)));
  const std::int64_t q_blocks = (d.Tq + block - 1) / block;
  const std::int64_t items = d.B * d.Hq * q_blocks;
#pragma omp parallel
  {
    ForwardScratch<T> scratch(block, d.D, d.Dv);
    const SoftmaxState<T> state = scratch.state();
    // Dynamic scheduling, last q-blocks first: under a causal mask they are the heaviest, so the
    // light ones fill in at the end.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t i0 = (q_blocks - 1 - item % q_blocks) * block;
      const std::int64_t bh = item / q_blocks;
      const std::int64_t b = bh / d.Hq;
      const std::int64_t h = bh % d.Hq;
      const std::int64_t rows = std::min(block, d.Tq - i0);
      const std::int64_t live = live_rows(p, b, i0, rows);
      const std::int64_t head_kv = b * d.Hk + h / d.group();
      state.reset(rows, d.Dv);
      attend_keys(p, kt.get() + head_kv * d.D * tk_pad, vt.get() + head_kv * d.Dv * tk_pad,
                  v_finite.data() + head_kv * tiles, b, h, i0, live, scratch, state);
      write_rows(d, b, h, i0, rows, live, state.acc, state.m, state.l, out, lse);
    }
  }
}

// The query heads [lo, hi) of one decode item: whole GQA groups, so whole k/v heads.
struct HeadRange {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
};

// The scores (scale q_i) . k_j (q_scaled: scale * Q, [B, Tq, Hq, D]) of the rows [0, live) of the
// heads in `heads` of batch b against keys [j0, j0 + cols), into S [Hq * Tq, kBk] (row h * Tq +
// i). Key by key: the K rows of one key, all heads side by side, are one contiguous run, so K
// streams through memory in order and the hardware prefetchers follow it (head by head it would
// jump Hk * D elements per key, a page at D = 128, Hk = 8, where they stop).
template <class T, class ScoreMod, class MaskMod>
void decode_scores(const Problem<T, ScoreMod, MaskMod>& p, const T* q_scaled, std::int64_t b,
                   HeadRange heads, std::int64_t live, std::int64_t j0, std::int64_t cols, T* S) {
  const Dims& d = p.dims;
  for (std::int64_t c = 0; c < cols; ++c) {
    const T* k_row = p.k + (b * d.Tk + j0 + c) * d.Hk * d.D;
    for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
      const T* k = k_row + h / d.group() * d.D;
      for (std::int64_t i = 0; i < live; ++i) {
        const T* q = q_scaled + ((b * d.Tq + i) * d.Hq + h) * d.D;
        S[(h * d.Tq + i) * kBk + c] = score_dot(q, k, d.D);
      }
    }
  }
  // The columns past cols, which soft-capping reads with the rest of a row before the mask sets
  // them to -inf.
  for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
    for (std::int64_t i = 0; i < live; ++i) {
      std::fill(S + (h * d.Tq + i) * kBk + cols, S + (h * d.Tq + i + 1) * kBk, T(0));
    }
  }
}

// acc [Hq * Tq, Dv] += P V for keys [j0, j0 + cols) of batch b (rows [0, live) of the heads in
// `heads`), with P [Hq * Tq, kBk] as decode_scores lays it out; kinds [Hq]: each head's tile.
// Key by key, so V streams in order too. In a partial tile, only the pairs the mask keeps: a
// value the mask drops (a KV cache's unused tail) may hold anything, and 0 * NaN is NaN.
template <class T, class ScoreMod, class MaskMod>
void decode_values(const Problem<T, ScoreMod, MaskMod>& p, std::int64_t b, HeadRange heads,
                   std::int64_t live, std::int64_t j0, std::int64_t cols, const TileKind* kinds,
                   const T* P, T* acc) {
  const Dims& d = p.dims;
  for (std::int64_t c = 0; c < cols; ++c) {
    const T* v_row = p.v + (b * d.Tk + j0 + c) * d.Hk * d.Dv;
    for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
      if (kinds[h] == TileKind::empty) continue;
      const T* v = v_row + h / d.group() * d.Dv;
      for (std::int64_t i = 0; i < live; ++i) {
        if (kinds[h] == TileKind::partial && !p.mask_mod(b, h, i, j0 + c)) continue;
        axpy(P[(h * d.Tq + i) * kBk + c], v, acc + (h * d.Tq + i) * d.Dv, d.Dv);
      }
    }
  }
}

template <class T, class ScoreMod, class MaskMod>
void forward_split_keys(const Problem<T, ScoreMod, MaskMod>& p, T* out, T* lse) {
  const Dims& d = p.dims;
  const std::int64_t splits = (d.Tk + TileTraits::kDecodeSplit - 1) / TileTraits::kDecodeSplit;
  const std::int64_t rows = d.B * d.Hq * d.Tq;  // one partial state per query row and split
  auto part_m = hwy::AllocateAligned<T>(static_cast<size_t>(rows * splits));
  auto part_l = hwy::AllocateAligned<T>(static_cast<size_t>(rows * splits));
  auto part_acc = hwy::AllocateAligned<T>(static_cast<size_t>(rows * splits * d.Dv));
  auto q_scaled = hwy::AllocateAligned<T>(static_cast<size_t>(rows * d.D));  // scale * Q
  scale_rows(p.q, d.D, rows, d.D, p.scale, q_scaled.get());
  // Partial state of (b, h, i) for split c, at index ((b * Hq + h) * Tq + i) * splits + c.
  // Fewer (batch, split) pairs than threads (short caches, B = 1) would leave threads idle: then
  // the k/v heads are dealt out too, in as few groups as give every thread an item. No more
  // than that: a group reads only its share of each key's row, and the gaps cost bandwidth (Tq =
  // 1, Tk = 4096, D = 128, H = 8, 2 threads: 13.7-14.4 GB/s in 4 items of all heads, 8.3 GB/s
  // in 8 items of half the heads; Tk = 1024: 9.6-10.6 GB/s in 2 groups, ~7 in 1 item). A
  // partial's arithmetic does not depend on which item computes it, so neither do the results.
  constexpr std::int64_t kItemsPerThread = 1;
  const std::int64_t want_groups =
      (kItemsPerThread * omp_get_max_threads() + d.B * splits - 1) / (d.B * splits);
  const std::int64_t kv_per_group =
      (d.Hk + std::min(want_groups, d.Hk) - 1) / std::min(want_groups, d.Hk);
  const std::int64_t groups = (d.Hk + kv_per_group - 1) / kv_per_group;
  const std::int64_t items = d.B * splits * groups;
  const BlockView blocks(p.blocks);
#pragma omp parallel
  {
    ForwardScratch<T> scratch(d.Hq * d.Tq, 0, d.Dv);  // rows h * Tq + i; no Q rows
    const SoftmaxState<T> state = scratch.state();
    std::vector<TileKind> kinds(static_cast<std::size_t>(d.Hq));  // each head's tile
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t group = item % groups;
      const std::int64_t split = item / groups % splits;
      const std::int64_t b = item / groups / splits;
      const HeadRange heads{group * kv_per_group * d.group(),
                            std::min((group + 1) * kv_per_group, d.Hk) * d.group()};
      const std::int64_t live = live_rows(p, b, 0, d.Tq);
      const std::int64_t k_end = std::min((split + 1) * TileTraits::kDecodeSplit, d.Tk);
      state.rows_from(heads.lo * d.Tq, d.Dv).reset((heads.hi - heads.lo) * d.Tq, d.Dv);
      for (std::int64_t j0 = split * TileTraits::kDecodeSplit; j0 < k_end; j0 += kBk) {
        const std::int64_t cols = std::min(kBk, k_end - j0);
        bool any = false;
        for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
          kinds[h] = live > 0 ? blocks.kind(b, h, 0, j0 / kBk) : TileKind::empty;
          any = any || kinds[h] != TileKind::empty;
        }
        if (!any) continue;
        decode_scores(p, q_scaled.get(), b, heads, live, j0, cols, scratch.s.get());
        for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
          if (kinds[h] == TileKind::empty) continue;
          softmax_tile(p, b, h, 0, live, j0, cols, &kinds[h], scratch.s.get() + h * d.Tq * kBk,
                       scratch.z.get(), state.rows_from(h * d.Tq, d.Dv));
        }
        decode_values(p, b, heads, live, j0, cols, kinds.data(), scratch.s.get(), state.acc);
      }
      for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
        for (std::int64_t i = 0; i < d.Tq; ++i) {
          const std::int64_t at = ((b * d.Hq + h) * d.Tq + i) * splits + split;
          part_m[at] = state.m[h * d.Tq + i];
          part_l[at] = state.l[h * d.Tq + i];
          std::copy_n(state.acc + (h * d.Tq + i) * d.Dv, d.Dv, part_acc.get() + at * d.Dv);
        }
      }
    }
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t i = row % d.Tq;
    const std::int64_t h = row / d.Tq % d.Hq;
    const std::int64_t b = row / d.Tq / d.Hq;
    const T* m = part_m.get() + row * splits;
    const T* l = part_l.get() + row * splits;
    const T* acc = part_acc.get() + row * splits * d.Dv;
    T m_all = -std::numeric_limits<T>::infinity();
    for (std::int64_t c = 0; c < splits; ++c) m_all = std::max(m_all, m[c]);
    // A split whose kept scores were only -inf and NaN holds l = NaN with m = -inf: shifting by 0
    // then, its weight exp(-inf) = 0 still carries the NaN (NaN * 0) into l_all.
    const T shift = m_all == -std::numeric_limits<T>::infinity() ? T(0) : m_all;
    T l_all = 0;
    T* o = out + ((b * d.Tq + i) * d.Hq + h) * d.Dv;
    std::fill(o, o + d.Dv, T(0));
    for (std::int64_t c = 0; c < splits; ++c) {
      if (l[c] == T(0)) continue;  // kept nothing
      const T weight = std::exp(m[c] - shift);
      l_all += l[c] * weight;
      for (std::int64_t x = 0; x < d.Dv; ++x) o[x] += acc[c * d.Dv + x] * weight;
    }
    const std::int64_t live = live_rows(p, b, i, 1);
    const T merged_m[1] = {m_all};
    const T merged_l[1] = {l_all};
    // write_rows normalizes in place: o holds the merged accumulator.
    write_rows(d, b, h, i, 1, live, o, merged_m, merged_l, out, lse);
  }
}

template <class T, class ScoreMod, class MaskMod>
void forward_impl(const Problem<T, ScoreMod, MaskMod>& p, T* out, T* lse) {
  const Dims& d = p.dims;
  if (d.Tq <= TileTraits::kDecodeMaxQueries) {
    forward_split_keys(p, out, lse);
  } else {
    forward_tiled(p, out, lse);
  }
}

void ExpSoftmaxF32(const float* x, float* y, std::int64_t n) {
  const hn::ScalableTag<float> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(exp_softmax(d, hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) {
    const hn::CappedTag<float, 1> d1;
    hn::StoreU(exp_softmax(d1, hn::LoadU(d1, x + i)), d1, y + i);
  }
}

void ForwardF32(const Problem<float>& p, float* out, float* lse) { forward_impl(p, out, lse); }
void ForwardF64(const Problem<double>& p, double* out, double* lse) { forward_impl(p, out, lse); }
void FlexForwardF32(const FlexProblem<float>& p, float* out, float* lse) {
  forward_impl(p, out, lse);
}
void FlexForwardF64(const FlexProblem<double>& p, double* out, double* lse) {
  forward_impl(p, out, lse);
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(ExpSoftmaxF32);
HWY_EXPORT(ForwardF32);
HWY_EXPORT(ForwardF64);
HWY_EXPORT(FlexForwardF32);
HWY_EXPORT(FlexForwardF64);

void exp_softmax(const float* x, float* y, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(ExpSoftmaxF32)(x, y, n);
}

template <>
void forward(const Problem<float>& problem, float* out, float* lse) {
  HWY_DYNAMIC_DISPATCH(ForwardF32)(problem, out, lse);
}

template <>
void forward(const Problem<double>& problem, double* out, double* lse) {
  HWY_DYNAMIC_DISPATCH(ForwardF64)(problem, out, lse);
}

template <>
void forward(const FlexProblem<float>& problem, float* out, float* lse) {
  HWY_DYNAMIC_DISPATCH(FlexForwardF32)(problem, out, lse);
}

template <>
void forward(const FlexProblem<double>& problem, double* out, double* lse) {
  HWY_DYNAMIC_DISPATCH(FlexForwardF64)(problem, out, lse);
}

}  // namespace qkv::kernels::cpu
#endif
