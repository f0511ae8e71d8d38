// The fused forward for decoding: few queries (TileTraits::decode_shape) against a long KV
// cache, in the compute type or (f32) in bf16 or f16 as the cache lies. K and V are read once, key
// by key and in order (no packed tiles), in splits of keys (split_keys) that threads take in
// parallel; each split leaves a partial online-softmax state per query row (softmax_state-inl.h),
// merged exactly at the end (split-KV, as FlashDecoding). Every mod and the block mask as in the
// tiled forward (flash_fwd.cpp). A k/v head with few query rows scores them by dot products; one
// with many (GQA groups, several queries: TileTraits::kDecodeGroupedRows) by small matrix
// products over each tile of keys. Where q, k and v are all bf16 and a k/v head has 3 query rows
// or more, scores and P V are bf16 products instead (VDPBF16PS, bf16_dots.hpp: DecodeDots).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/flash_decode.cpp"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/block_view.hpp"
#include "kernels/cpu/bf16_dots.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/decode.hpp"
#include "kernels/cpu/gemm-inl.h"
#include "kernels/cpu/large_buffer.hpp"
#include "kernels/cpu/load_as-inl.h"
#include "kernels/cpu/pack-inl.h"
#include "kernels/cpu/softmax_state-inl.h"
#include "kernels/cpu/tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

// The query heads [lo, hi) of one decode item: whole GQA groups, so whole k/v heads.
struct HeadRange {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
};

// Asks the cache for the rows of key j of k/v heads [hk_lo, hk_hi) of batch b (dim elements
// each), one prefetch per 64-byte line.
template <class E>
void prefetch_key(const Rows<const E>& rows, std::int64_t b, std::int64_t j, std::int64_t hk_lo,
                  std::int64_t hk_hi, std::int64_t dim) {
  const std::int64_t bytes = dim * static_cast<std::int64_t>(sizeof(E));
  for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
    const char* at = reinterpret_cast<const char*>(rows.at(b, j, hk));
    for (std::int64_t x = 0; x < bytes; x += 64) hwy::Prefetch(at + x);
  }
}

// The query rows of k/v head hk of batch b that a decode item takes, queries [0, live) of heads hk
// G to hk G + G - 1 in S's order (row h Tq + i): each row's scaled q (q_scaled [B, Tq, Hq, D]) and
// row index. At most kDotRows: the dot products' groups have G Tq < kDecodeGroupedRows.
template <class T>
struct GroupRows {
  const T* q[kDotRows];
  std::int64_t row[kDotRows];
  std::int64_t n = 0;
  GroupRows(const Dims& d, const T* q_scaled, std::int64_t b, std::int64_t hk, std::int64_t live) {
    for (std::int64_t h = hk * d.group(); h < (hk + 1) * d.group(); ++h) {
      for (std::int64_t i = 0; i < live; ++i) {
        q[n] = q_scaled + ((b * d.Tq + i) * d.Hq + h) * d.D;
        row[n++] = h * d.Tq + i;
      }
    }
  }
};
static_assert(TileTraits::kDecodeGroupedRows - 1 <= kDotRows, "a dot-product group fits GroupRows");

// Where q, k and v are all bf16 and decode_bf16_dots says so, the scores come from bf16 dot
// products of the rows as they lie (bf16_dots.hpp), as the backward recomputes them
// (flash_bwd.cpp's tile_scores), in place of score_dot or grouped_scores, and full tiles' P V from
// bf16_values. q: Q [B, Tq, Hq, D] as bf16 bits.
struct DecodeDots {
  bool on = false;
  MatrixPath path = MatrixPath::amx_emulated;
  const std::uint16_t* q = nullptr;
  float scale = 1;
};

// S[(h Tq + i) kBk + c] <- the score of query i (in [0, live)) of head h of k/v head hk of batch
// b against key c in [0, n) of k (bf16 rows ldk apart), from the bf16 dot products, kBf16DotRows
// rows a call.
template <class E>
void head_dots(const Dims& d, const DecodeDots& dots, std::int64_t b, std::int64_t hk,
               std::int64_t live, const E* k, std::int64_t ldk, std::int64_t n, float* S) {
  static_assert(sizeof(E) == 2, "bf16 keys");
  const std::uint16_t* q[kBf16DotRows];
  float* s[kBf16DotRows];
  std::int64_t m = 0;
  const auto flush = [&] {
    bf16_score_dots(dots.path, q, m, reinterpret_cast<const std::uint16_t*>(k), ldk, n, d.D,
                    dots.scale, s);
    m = 0;
  };
  for (std::int64_t h = hk * d.group(); h < (hk + 1) * d.group(); ++h) {
    for (std::int64_t i = 0; i < live; ++i) {
      q[m] = dots.q + ((b * d.Tq + i) * d.Hq + h) * d.D;
      s[m++] = S + (h * d.Tq + i) * kBk;
      if (m == kBf16DotRows) flush();
    }
  }
  if (m > 0) flush();
}

// The scores (scale q_i) . k_j (q_scaled: scale * Q, [B, Tq, Hq, D] contiguous) of the rows
// [0, live) of the heads in `heads` of batch b against keys [j0, j0 + cols), into S [Hq * Tq, kBk]
// (row h * Tq + i). Key by key: the K rows of one key, all heads side by side, are one contiguous
// run, so K streams through memory in order and the hardware prefetchers follow it (head by head it
// would jump Hk * D elements per key, a page at D = 128, Hk = 8, where they stop). The same
// key's V rows are prefetched as its K rows are read, so that two streams are in flight instead
// of one and decode_values finds the tile's V in cache. Measured (`qkv bench --decode-only
// --decode-tk 4096 16384 65536 --threads 2`, H = 8, D = 128, AMD EPYC (avx2 avx512_bf16
// avx512f), 2026-11-24, two alternated runs, ms): f16 cache without / with: Tk = 16384 2.20 1.92
// / 1.30 1.36, Tk = 65536 8.97 8.66 / 6.59 7.02 (bf16: 1.88 1.91 / 1.52 1.26, 8.80 8.56 / 6.81
// 6.40; f32 unchanged within the noise, 3.47 3.54 / 3.59 3.56 at 16384). Prefetching K further
// ahead as well (8 to 32 keys, or the next tile's K during decode_values) measured no better;
// nor on an Intel Xeon (AVX512-BF16, AMX; 2026-11-27, f16 cache, Tk = 65536, three alternated
// runs, ms): 13.9, 14.0, 14.3 without, 14.9, 15.4, 15.8 with K 8 keys ahead, 15.2, 15.7, 15.7
// at 32. A cache stored heads first, where an item reads one k/v head (decode_impl), also asks
// for K k_ahead keys ahead (0: not), see kHeadsFirstKAhead.
// runs (where kSharedSums<T>): keys taken kScoreRun at a time and head by head within the run,
// each row's run of scores from score_dots (the same bits), for calls whose K sits in cache (see
// decode_impl).
// With dots.on, the scores are the bf16 dot products', in runs of keys whatever `runs` says, and
// nothing is asked of the cache.
template <class T, class ScoreMod, class MaskMod, class E>
void decode_scores(const FwdParams<T, ScoreMod, MaskMod>& p, const Rows<const E>& k_rows,
                   const Rows<const E>& v_rows, const T* q_scaled, const DecodeDots& dots,
                   std::int64_t b, HeadRange heads, std::int64_t live, std::int64_t j0,
                   std::int64_t cols, std::int64_t k_ahead, bool runs, T* S) {
  const Dims& d = p.dims;
  const std::int64_t hk_lo = heads.lo / d.group(), hk_hi = heads.hi / d.group();
  // Key c's V rows, and K's k_ahead keys on, asked of the cache.
  const auto ask = [&](std::int64_t c) {
    prefetch_key(v_rows, b, j0 + c, hk_lo, hk_hi, d.Dv);
    if (k_ahead > 0 && j0 + c + k_ahead < d.Tk) {
      prefetch_key(k_rows, b, j0 + c + k_ahead, hk_lo, hk_hi, d.D);
    }
  };
  if (dots.on) {
    if constexpr (std::is_same_v<E, Bf16>) {
      // A whole tile a call where an item reads one k/v head or its rows go in lanes (whose calls
      // lay the rows out once), else 16 keys a call across the heads, each key's rows of every
      // head read close together. A driver switching them call by call (bf16, D 128, 2 threads,
      // AMD EPYC (family 25, model 17) Zen 4 VM, 2026-11-30, two rounds), whole tiles over runs
      // of 16: heads first Hq 32 over Hk 8 at Tk 4096 0.94-0.95 and 65536 0.95-0.97, Hq 64
      // 0.94-1.01, Tq 16 over Hq 8 0.84; [B, T, H, D] Hq 32 1.05-1.10, Hq 64 1.01-1.04, but Tq 16
      // 0.97. And no asks of the cache here (ask above): with them, heads first took 1.08-1.33x
      // the time (Hq 32, Hq 64 over Hk 8, Tq 16 over Hq 8, Tk 65536, the same driver, three runs
      // of two rounds, the triad at 21-32 GB/s), [B, T, H, D] 1.00-1.07x; the other paths' asks
      // made no difference that day (f16 and f32 caches, both layouts, 0.96-1.08).
      const bool whole_tiles = hk_hi - hk_lo == 1 || d.group() * live >= kBf16LaneRows;
      const std::int64_t run = whole_tiles ? kBf16DotKeys : 16;
      for (std::int64_t c0 = 0; c0 < cols; c0 += run) {
        const std::int64_t n = std::min(run, cols - c0);
        for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
          head_dots(d, dots, b, hk, live, k_rows.at(b, j0 + c0, hk), k_rows.row, n, S + c0);
        }
      }
    }
  } else if (kSharedSums<T> && runs) {
    for (std::int64_t c0 = 0; c0 < cols; c0 += kScoreRun) {
      const std::int64_t n = std::min(kScoreRun, cols - c0);
      for (std::int64_t c = c0; c < c0 + n; ++c) ask(c);
      for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
        const GroupRows<T> group(d, q_scaled, b, hk, live);
        T* s[kDotRows];
        for (std::int64_t r = 0; r < group.n; ++r) s[r] = S + group.row[r] * kBk + c0;
        score_dots_rows(group.q, group.n, k_rows.at(b, j0 + c0, hk), k_rows.row, n, d.D, s);
      }
    }
  } else {
    T s[kDotRows];
    for (std::int64_t c = 0; c < cols; ++c) {
      ask(c);
      for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
        const GroupRows<T> group(d, q_scaled, b, hk, live);
        score_dot_rows(group.q, group.n, k_rows.at(b, j0 + c, hk), d.D, s);
        for (std::int64_t r = 0; r < group.n; ++r) S[group.row[r] * kBk + c] = s[r];
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
// The tile's V rows are in cache (decode_scores asked for them, but for the bf16 dots). Full tiles
// a k/v head at a time over all the tile's keys (values_rows), where an axpy per key and row loaded
// and stored each accumulator row every key (four keys at a time before): with the runs of
// heads-first items and their splits, `qkv bench`'s decode shape in a driver, builds alternated in
// three rounds (f16 cache, Tq 1, Hq 8 over Hk 8, D 128, 2 threads, AMD EPYC (family 25, model 17)
// Zen 4 VM, 2026-11-29, time over the previous build's): [B, T, H, D] Tk 4096 0.79-0.86, 16384
// 0.78-0.91; heads first Tk 4096 0.47-0.69, 16384 0.51-0.68, 65536 0.71-0.76; Hq 32 over Hk 8 heads
// first 0.61-0.65 and 0.78-0.80 at 4096 and 65536 keys (bench/README.md). Partial tiles key by key,
// and only the pairs the mask keeps: a value the mask drops (a KV cache's unused tail) may hold
// anything, and 0 * NaN is NaN.
// With dots.on, the full tiles' products are bf16_values' (P rounded to bf16, bf16_dots.hpp).
template <class T, class ScoreMod, class MaskMod, class E>
void decode_values(const FwdParams<T, ScoreMod, MaskMod>& p, const Rows<const E>& v_rows,
                   const DecodeDots& dots, std::int64_t b, HeadRange heads, std::int64_t live,
                   std::int64_t j0, std::int64_t cols, const TileKind* kinds, const T* P, T* acc) {
  const Dims& d = p.dims;
  // Where a head's tile is full, the rows of a k/v head's heads in one product over the tile's
  // keys (values_rows): each accumulator row stays in registers across the keys, and each V row is
  // loaded once for all of them, with the same multiply-adds in the same order as an axpy per key.
  // kDotRows rows at a time (a grouped call's heads that are not all full come here too).
  const T* a[kDotRows];
  T* y[kDotRows];
  for (std::int64_t hk = heads.lo / d.group(); hk < heads.hi / d.group(); ++hk) {
    std::int64_t n = 0;
    const auto flush = [&] {
      if constexpr (std::is_same_v<E, Bf16>) {
        if (dots.on) {
          static_assert(kDotRows <= kBf16DotRows && kBk <= kBf16ValueKeys,
                        "a flush fits one bf16_values call");
          bf16_values(dots.path, a, n, reinterpret_cast<const std::uint16_t*>(v_rows.at(b, j0, hk)),
                      v_rows.row, cols, d.Dv, y);
          n = 0;
          return;
        }
      }
      values_rows(a, v_rows.at(b, j0, hk), v_rows.row, cols, y, n, d.Dv);
      n = 0;
    };
    for (std::int64_t h = hk * d.group(); h < (hk + 1) * d.group(); ++h) {
      if (kinds[h] != TileKind::full) continue;
      for (std::int64_t i = 0; i < live; ++i) {
        a[n] = P + (h * d.Tq + i) * kBk;
        y[n++] = acc + (h * d.Tq + i) * d.Dv;
        if (n == kDotRows) flush();
      }
    }
    if (n > 0) flush();
  }
  // Most tiles have no partial head: then the key-by-key walk below, which checked each head's
  // kind once a key, is skipped whole. It took 9% of a call's samples (perf, bf16 cache heads
  // first, Hq 32 over Hk 8, Tk 2048, one thread). Skipped against walked, switched call by call
  // in one build (qkv::attention_forward, D 128, 2 threads, AMD EPYC (avx2 avx512_bf16 avx512f),
  // family 25 model 17 Zen 4 VM, 2026-11-29, two rounds), time over walked: bf16 Tk 4096 0.87
  // heads first and 0.93-0.98 [B, T, H, D]; Tk 65536 bf16 0.94-0.96 heads first and 0.94-0.96
  // [B, T, H, D], f16 0.90-0.95 heads first and 0.99-1.00 [B, T, H, D].
  if (std::none_of(kinds + heads.lo, kinds + heads.hi,
                   [](TileKind kind) { return kind == TileKind::partial; })) {
    return;
  }
  for (std::int64_t k = 0; k < cols; ++k) {
    for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
      if (kinds[h] != TileKind::partial) continue;
      const E* v = v_rows.at(b, j0 + k, h / d.group());
      for (std::int64_t i = 0; i < live; ++i) {
        if (!p.mask_mod(b, h, i, j0 + k)) continue;
        axpy(P[(h * d.Tq + i) * kBk + k], v, acc + (h * d.Tq + i) * d.Dv, d.Dv);
      }
    }
  }
}

// softmax_tile for the heads in `heads` (kinds [Hq]: each head's tile), S rows h * Tq + i kBk
// apart, state rows likewise. Without dropout and with every query row live, the rows of a run of
// heads whose tiles are not empty go through one absorb, and its exps and row sums cover only the
// vectors that hold keys, round_up(cols, lanes) columns, not all kBk. Each row's arithmetic is
// its own, and the columns past cols are -inf, whose exp is +0, which leaves a lane's sum as it
// was: the state is bitwise softmax_tile's, head by head. A decoding step's attention call of qkv
// demo's translator (q [32, 1, 4, 32], 15 keys, one thread of the AMD EPYC Zen 5 VM, 2026-11-28,
// alternated runs of 50000 calls): 23.4-23.8 us head by head over kBk columns, 22.2-22.6 over
// the vectors with keys, 19.6-20.0 with the heads' rows in one absorb.
template <class T, class ScoreMod, class MaskMod>
void decode_softmax(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t b, HeadRange heads,
                    std::int64_t live, std::int64_t j0, std::int64_t cols, const TileKind* kinds,
                    T* S, T* z, const SoftmaxState<T>& state) {
  const Dims& d = p.dims;
  if (p.dropout.enabled() || live < d.Tq) {
    for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
      if (kinds[h] == TileKind::empty) continue;
      softmax_tile(p, b, h, 0, live, j0, cols, &kinds[h], S + h * d.Tq * kBk, z,
                   state.rows_from(h * d.Tq, d.Dv));
    }
    return;
  }
  const std::int64_t width =
      round_up(cols, static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<T>())));
  // The rows [first, end) of a run of heads, in absorbs of at most one q-block's rows.
  const auto absorb_rows = [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = first; r < end; r += TileTraits::kForwardBlockQ) {
      const std::int64_t n = std::min(TileTraits::kForwardBlockQ, end - r);
      state.rows_from(r, d.Dv).absorb(S + r * kBk, n, d.Dv, nullptr, width, T(1), nullptr, kBk);
    }
  };
  std::int64_t run = heads.lo;  // the first head of the current run
  for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
    if (kinds[h] == TileKind::empty) {
      absorb_rows(run * d.Tq, h * d.Tq);
      run = h + 1;
      continue;
    }
    score_tile(p, b, h, 0, live, j0, cols, &kinds[h], S + h * d.Tq * kBk, static_cast<T*>(nullptr));
  }
  absorb_rows(run * d.Tq, heads.hi * d.Tq);
}

// The tile of keys [j0, j0 + cols) of batch b folded into `state`, the rows of the heads in
// `heads` (row h * Tq + i), key by key: the key's K rows and their scores, one online-softmax step
// for all the rows at once, a vector of rows at a time (their new maxima, rescaling factors,
// weights and sums, with the tile's maxima and sums held in `step`), then the key's V rows. For
// tiles that every head keeps whole, with plain scores, no dropout and every query row live; the
// same state as decode_scores, decode_softmax and decode_values would leave, up to rounding (the
// sums are taken in another order). A key's K and V rows are read together, so both streams are
// demand reads the hardware prefetchers follow and memory never idles through a tile's softmax.
// A scratch program with this kernel's arithmetic (f16 cache, 65536 keys, H 8, D 128, 2 threads,
// AMD EPYC (avx2 avx512_bf16 avx512f) Zen 5 VM, 2026-11-28; bench/README.md) read 50.5 GB/s in
// tiles of 64 keys, 56.3 key by key, against 55.3 for loads alone. The step in vectors instead of
// a scalar loop over the rows (with two vector exps): `qkv bench --decode-only --decode-tk 16384
// 65536 --dtype f16 --threads 2 --reps 15`, the same VM, 8 alternated rounds, medians of the
// rounds' ratios, 0.90 of the time at 16384 keys (0.83-0.96), 0.97 at 65536 (0.83-1.30: the
// host's bandwidth moved by 1.4x between rounds). Tried and not kept, the same way: 4 keys a step
// (one load and store of each accumulator row per 4 keys), 1.7x the time, 1.25x with V
// prefetched as K is read; K and V prefetched 8 keys ahead, 1.4x. k_ahead: as decode_scores.
// step [5 * round_up(rows, lanes)], aligned: scratch.
template <class T, class E>
void decode_online(const Dims& d, const Rows<const E>& k_rows, const Rows<const E>& v_rows,
                   const T* q_scaled, std::int64_t b, HeadRange heads, std::int64_t j0,
                   std::int64_t cols, std::int64_t k_ahead, const SoftmaxState<T>& state, T* step) {
  const hn::ScalableTag<T> dt;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(dt));
  const std::int64_t n = (heads.hi - heads.lo) * d.Tq;  // rows, from heads.lo * Tq
  const std::int64_t width = round_up(n, lanes);
  // The rows' maxima and sums for the tile, padded to whole vectors (the lanes past n compute
  // what no row reads), the key's scores, and each row's rescaling factor and weight.
  T* m = step;
  T* l = step + width;
  T* s = step + 2 * width;
  T* alpha = step + 3 * width;
  T* weight = step + 4 * width;
  const SoftmaxState<T> rows = state.rows_from(heads.lo * d.Tq, d.Dv);
  std::copy_n(rows.m, n, m);
  std::copy_n(rows.l, n, l);
  std::fill(m + n, m + width, T(0));
  std::fill(l + n, l + width, T(0));
  std::fill(s + n, s + width, T(0));
  const auto neg_inf = hn::Set(dt, -std::numeric_limits<T>::infinity());
  const auto one = hn::Set(dt, T(1));
  const auto nan = hn::Set(dt, std::numeric_limits<T>::quiet_NaN());
  const std::int64_t hk_lo = heads.lo / d.group(), hk_hi = heads.hi / d.group();
  for (std::int64_t j = j0; j < j0 + cols; ++j) {
    if (k_ahead > 0 && j + k_ahead < d.Tk) {
      prefetch_key(k_rows, b, j + k_ahead, hk_lo, hk_hi, d.D);
    }
    for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
      const GroupRows<T> group(d, q_scaled, b, hk, d.Tq);
      score_dot_rows(group.q, group.n, k_rows.at(b, j, hk), d.D,
                     s + group.row[0] - heads.lo * d.Tq);
    }
    // One online-softmax step for the rows, lanes at a time. A NaN score poisons its row's sum
    // (docs/numerics.md), as absorb's, and moves nothing else; a row that has kept only -inf
    // scores keeps nothing (its factor exp(0), its weight exp(-inf) = 0).
    bool moved = false;
    for (std::int64_t r = 0; r < width; r += lanes) {
      const auto m_old = hn::Load(dt, m + r), score = hn::Load(dt, s + r);
      const auto is_nan = hn::IsNaN(score);
      const auto m_new = hn::IfThenElse(is_nan, m_old, hn::Max(m_old, score));
      const auto dead = hn::Eq(m_new, neg_inf);
      const auto factor = exp_softmax(
          dt, hn::IfThenZeroElse(
                  dead, hn::IfThenElse(hn::Eq(m_old, neg_inf), neg_inf, hn::Sub(m_old, m_new))));
      const auto w =
          exp_softmax(dt, hn::IfThenElse(hn::Or(is_nan, dead), neg_inf, hn::Sub(score, m_new)));
      hn::Store(m_new, dt, m + r);
      hn::Store(hn::IfThenElse(is_nan, nan, hn::MulAdd(hn::Load(dt, l + r), factor, w)), dt, l + r);
      hn::Store(factor, dt, alpha + r);
      hn::Store(w, dt, weight + r);
      moved = moved || !hn::AllTrue(dt, hn::Eq(factor, one));
    }
    if (moved) {
      for (std::int64_t r = 0; r < n; ++r) {
        if (alpha[r] != T(1)) scale_row(rows.acc + r * d.Dv, d.Dv, alpha[r]);
      }
    }
    for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
      const std::int64_t first = (hk * d.group() - heads.lo) * d.Tq, n = d.group() * d.Tq;
      T* y[kDotRows];
      for (std::int64_t r = 0; r < n; ++r) y[r] = rows.acc + (first + r) * d.Dv;
      axpy_rows(weight + first, v_rows.at(b, j, hk), y, n, d.Dv);
    }
  }
  std::copy_n(m, n, rows.m);
  std::copy_n(l, n, rows.l);
}

constexpr std::int64_t kGroupedRows = TileTraits::kDecodeGroupedRows;

// Per-thread scratch of the grouped products: each k/v head's query rows (group_queries), a tile
// of K transposed [D, kBk], and a tile of K of every k/v head, or of V of one, in T [Hk, kBk, D]
// or [kBk, Dv].
template <class T>
struct GroupScratch {
  hwy::AlignedFreeUniquePtr<T[]> q, kt, rows;
  GroupScratch(std::int64_t heads_kv, std::int64_t group_rows, std::int64_t dim, std::int64_t dim_v)
      : q(hwy::AllocateAligned<T>(std::max<std::int64_t>(heads_kv * group_rows * dim, 1))),
        kt(hwy::AllocateAligned<T>(std::max<std::int64_t>(dim * kBk, 1))),
        rows(hwy::AllocateAligned<T>(
            std::max<std::int64_t>(kBk * std::max(heads_kv * dim, dim_v), 1))) {}
  // k/v head hk's rows of q, for `group_rows` rows a head.
  T* head_q(std::int64_t hk, std::int64_t group_rows, std::int64_t dim) const {
    return q.get() + hk * group_rows * dim;
  }
};

// q [G Tq, D] <- the scaled query rows of k/v head hk of batch b, head-major (row g * Tq + i:
// query i of head hk * G + g), from q_scaled [B, Tq, Hq, D].
template <class T>
void group_queries(const Dims& d, const T* q_scaled, std::int64_t b, std::int64_t hk, T* q) {
  for (std::int64_t g = 0; g < d.group(); ++g) {
    for (std::int64_t i = 0; i < d.Tq; ++i) {
      std::copy_n(q_scaled + ((b * d.Tq + i) * d.Hq + hk * d.group() + g) * d.D, d.D,
                  q + (g * d.Tq + i) * d.D);
    }
  }
}

// The scores of the query rows of k/v heads [hk_lo, hk_hi) (their q in scratch, group_queries)
// against keys [j0, j0 + cols) of batch b, into S rows hk_lo * G * Tq onwards (decode_scores'
// layout, columns past cols 0): first every head's tile of K converted to T key by key, so K
// streams through memory in order as in decode_scores (one head at a time, 256 bytes of every 2
// KiB, stalled on memory for 65% of this function's time at Hq 32 over Hk 8), with V's rows
// prefetched alongside; then per head the tile transposed to [D, kBk] and one product for all
// its rows, where dot products would reduce every (row, key) pair apart.
template <class T, class E>
void grouped_scores(const Dims& d, const Rows<const E>& k_rows, const Rows<const E>& v_rows,
                    std::int64_t b, std::int64_t hk_lo, std::int64_t hk_hi, std::int64_t j0,
                    std::int64_t cols, GroupScratch<T>& scratch, T* S) {
  T* rows = scratch.rows.get();  // [hk_hi - hk_lo, kBk, D]
  for (std::int64_t c = 0; c < cols; ++c) {
    prefetch_key(v_rows, b, j0 + c, hk_lo, hk_hi, d.Dv);
    for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
      convert_rows(k_rows.at(b, j0 + c, hk), k_rows.row, 1, d.D,
                   rows + ((hk - hk_lo) * kBk + c) * d.D, d.D);
    }
  }
  const std::int64_t group_rows = d.group() * d.Tq;
  for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
    pack_transposed(rows + (hk - hk_lo) * kBk * d.D, d.D, cols, d.D, kBk, scratch.kt.get());
    gemm<true>(group_rows, kBk, d.D, scratch.head_q(hk, group_rows, d.D), d.D, scratch.kt.get(),
               kBk, S + hk * group_rows * kBk, kBk, false);
  }
}

// acc rows of k/v head hk (hk * G * Tq onwards, [G Tq, Dv]) += P V for keys [j0, j0 + cols) of
// batch b, with P in S (decode_scores' layout): one product, V's tile converted to T first (read
// in place where it is T). For tiles full for every head of the group: partial ones drop pairs
// (decode_values).
template <class T, class E>
void grouped_values(const Dims& d, const Rows<const E>& v_rows, std::int64_t b, std::int64_t hk,
                    std::int64_t j0, std::int64_t cols, GroupScratch<T>& scratch, const T* S,
                    T* acc) {
  const std::int64_t group_rows = d.group() * d.Tq;
  const T* v = nullptr;
  std::int64_t ldv = d.Dv;
  if constexpr (std::is_same_v<E, T>) {
    v = v_rows.at(b, j0, hk);
    ldv = v_rows.row;
  } else {
    convert_rows(v_rows.at(b, j0, hk), v_rows.row, cols, d.Dv, scratch.rows.get(), d.Dv);
    v = scratch.rows.get();
  }
  gemm(group_rows, d.Dv, cols, S + hk * group_rows * kBk, kBk, v, ldv, acc + hk * group_rows * d.Dv,
       d.Dv, true);
}

// Keys per split. A cache stored heads first ([B, H, T, D], as PyTorch's caches), where an item
// reads one k/v head (decode_impl), takes longer splits where the keys allow: as few splits as
// still give the call kHeadsFirstItems items (its B * Hk heads times its splits), and never
// shorter than kDecodeSplit, so a short cache splits as [B, T, H, D] does and gives its bits. One
// head's split of 1024 keys is one run of 256 KiB of K and one of V (f16, D 128), and each new run
// costs the hardware prefetchers their start again. Counted from the shape alone, never the
// thread count, so the bits do not depend on it (docs/numerics.md). A driver alternating the
// rules call by call (qkv::attention_forward, f16 cache [1, 8, Tk, 128] permuted, Tq 1, 2
// threads, AMD EPYC (family 25, model 17) Zen 4 VM, 2026-11-29, medians of 21-41 calls, time over
// 1024 keys a split, two runs), with 8 / 16 / 32 / 64 items: Tk 65536 0.92-0.93 / 0.91-0.92 /
// 0.92 / 0.92-0.93, Tk 16384 0.89-0.91 / 0.88-0.94 / 0.91-0.93 / 0.95-0.96, Tk 4096 1.00 (each
// item before scoring its keys in runs, below); with the runs, 16 items against 1024 keys a split:
// 0.98-0.99 at Tk 65536 and 16384, and GQA (Hq 32) 0.99. Sixteen leaves room for more threads than
// eight would. In [B, T, H, D], where an item reads every head of each key (2 KiB a key, 2 MiB a
// split), 2048 to 8192 keys measured 0.95-1.00 and are not taken.
std::int64_t split_keys(const Dims& d, bool heads_first) {
  constexpr std::int64_t kHeadsFirstItems = 16;
  if (!heads_first) return TileTraits::kDecodeSplit;
  const std::int64_t heads = std::max<std::int64_t>(d.B * d.Hk, 1);
  const std::int64_t splits = std::max<std::int64_t>((kHeadsFirstItems + heads - 1) / heads, 1);
  const std::int64_t keys = round_up((d.Tk + splits - 1) / splits, TileTraits::kBlockK);
  return std::max(keys, TileTraits::kDecodeSplit);
}

template <class T, class ScoreMod, class MaskMod, class E>
void decode_impl(const FwdParams<T, ScoreMod, MaskMod>& p, const Rows<const E>& k,
                 const Rows<const E>& v) {
  const Dims& d = p.dims;
  const bool heads_first = k.head > k.row;
  const std::int64_t split_length = split_keys(d, heads_first);
  const std::int64_t splits = (d.Tk + split_length - 1) / split_length;
  const std::int64_t rows = d.B * d.Hq * d.Tq;  // one partial state per query row and split
  // From the block cache (large_buffer.hpp): from hwy::AllocateAligned, buffers of a few hundred
  // KiB were mapped and unmapped by glibc each call, fresh pages faulted in every time (a
  // training step's attention, B 32, Tq = Tk = 15, 4 heads of 32: ~100 page faults a call).
  // One split (Tk <= split_length) has nothing to merge: each item finalizes its rows into out,
  // with the bits the merge would give (one part: weight exp(0) = 1), and no second parallel
  // region.
  const bool one_split = splits == 1;
  const auto partials = [&](std::int64_t n) {
    return one_split ? LargeBuffer<T>() : allocate_large<T>(static_cast<size_t>(n));
  };
  const auto part_m = partials(rows * splits);
  const auto part_l = partials(rows * splits);
  const auto part_acc = partials(rows * splits * d.Dv);
  DecodeDots dots;
  LargeBuffer<std::uint16_t> q_bf16;  // Q [B, Tq, Hq, D] for the dots
  if constexpr (std::is_same_v<E, Bf16>) {
    if (p.half_kv.q.data != nullptr && decode_bf16_dots(d, dots.path)) {
      q_bf16 = allocate_large<std::uint16_t>(static_cast<size_t>(rows * d.D));
      for (std::int64_t bi = 0; bi < d.B * d.Tq; ++bi) {
        for (std::int64_t h = 0; h < d.Hq; ++h) {
          std::copy_n(p.half_kv.q.at(bi / d.Tq, bi % d.Tq, h), d.D,
                      q_bf16.get() + (bi * d.Hq + h) * d.D);
        }
      }
      dots = {true, dots.path, q_bf16.get(), p.scale};
    }
  }
  // scale * Q, where the dots do not score Q as it lies.
  const auto q_scaled = allocate_large<T>(static_cast<size_t>(dots.on ? 1 : rows * d.D));
  for (std::int64_t bi = 0; bi < d.B * d.Tq && !dots.on; ++bi) {  // the heads of row i of batch b
    scale_rows(p.q.at(bi / d.Tq, bi % d.Tq, 0), p.q.head, d.Hq, d.D, p.scale,
               q_scaled.get() + bi * d.Hq * d.D);
  }
  // Partial state of (b, h, i) for split c, at index ((b * Hq + h) * Tq + i) * splits + c.
  // Fewer (batch, split) pairs than threads (short caches, B = 1) would leave threads idle: then
  // the k/v heads are dealt out too, in as few groups as give every thread an item. No more
  // than that: a group reads only its share of each key's row, and the gaps cost bandwidth (Tq =
  // 1, Tk = 4096, D = 128, H = 8, 2 threads: 13.7-14.4 GB/s in 4 items of all heads, 8.3 GB/s
  // in 8 items of half the heads; Tk = 1024: 9.6-10.6 GB/s in 2 groups, ~7 in 1 item). A
  // partial's arithmetic does not depend on which item computes it, so neither do the results.
  // A cache stored heads first ([B, H, T, D], as PyTorch's caches: a k/v head's keys lie closer
  // together than a key's heads) is dealt out one k/v head an item instead, so that an item reads
  // one run of K and one of V; key by key across the heads, each key's rows would lie on Hk pages
  // of K and Hk of V. It also asks for K kHeadsFirstKAhead keys ahead, where the contiguous rows
  // of [B, T, H, D] need no help (decode_scores). A driver alternating the layouts call by call
  // (qkv::attention_forward, f16 cache, Tq = 1, H = 8, D = 128, 2 threads, AMD EPYC (avx2
  // avx512_bf16 avx512f) Zen 5 VM, 2026-11-28, medians of 21 to 41 calls), heads first over [B,
  // T, H, D]: Tk = 65536: 1.46 before, 1.21 one head an item, 1.23 / 1.14 / 1.13 / 1.22 with K
  // 4 / 8 / 16 / 32 keys ahead; Tk = 16384: 1.68 before, 1.13, 1.06 / 1.00 at 8 / 16.
  constexpr std::int64_t kItemsPerThread = 1;
  constexpr std::int64_t kHeadsFirstKAhead = 16;
  const std::int64_t k_ahead = heads_first ? kHeadsFirstKAhead : 0;
  const std::int64_t want_groups =
      heads_first ? d.Hk
                  : (kItemsPerThread * omp_get_max_threads() + d.B * splits - 1) / (d.B * splits);
  const std::int64_t kv_per_group =
      (d.Hk + std::min(want_groups, d.Hk) - 1) / std::min(want_groups, d.Hk);
  const std::int64_t groups = (d.Hk + kv_per_group - 1) / kv_per_group;
  const std::int64_t items = d.B * splits * groups;
  // Key by key (decode_online) where K and V come from memory, not from a cache that holds them
  // from the call before, and where a thread's item reads every head of a key (not heads first:
  // one row a key leaves the online step's exps nothing to share). Counted in elements, not bytes,
  // so that a 16-bit cache and the same cache converted to f32 take the same path and give the
  // same bits. `qkv bench --decode-only --dtype f16 --threads 2 --layout both` (H 8, D 128, Tq 1;
  // K and V of Tk x 2048 elements), AMD EPYC (avx2 avx512_bf16 avx512f) Zen 5 VM, 2026-11-28,
  // builds alternated, ms, tiles / key by key: [B, T, H, D] Tk 4096 0.19-0.21 / 0.25-0.26, 8192
  // 0.49 / 0.53, 12288 0.85-0.86 / 0.78-0.83, 16384 1.20-1.28 / 1.05-1.15, 65536 6.02-6.35 /
  // 5.28-5.48; [B, H, T, D] Tk 65536 5.95-6.17 / 8.58-8.81.
  constexpr std::int64_t kOnlineMinElements = std::int64_t{20} << 20;
  // And only for up to 2 query rows a k/v head: with more, the tiles' P V (values_rows, two rows
  // across whole V rows) beat the online step, which loads and stores every row's accumulator
  // every key. A driver alternating the two call by call (qkv::attention_forward, [B, T, H, D]
  // cache, Hk 8, D 128, 2 threads, AMD EPYC (family 25, model 17) Zen 4 VM, 2026-11-29, medians
  // of 11-21 calls, two rounds), time of the tiles over the online step: f16 Hq 32 at Tk 65536
  // 0.83-0.85 and at 16384 0.83-0.84, Tq 4 over Hq 8 0.84-0.88, Hq 24 (3 rows) 0.99-1.00, f32 Hq
  // 32 at 32768 0.62-0.63; Hq 16 (2 rows) 1.21-1.24.
  constexpr std::int64_t kOnlineRows = 3;
  const std::int64_t kv_elements = d.B * d.Tk * d.Hk * (d.D + d.Dv);
  // decode_scores in runs of keys head by head where the call's K fits half of L2: the scores' sums
  // share a tree (score_dots), and the jumps from head to head find K in cache. One thread, a
  // driver of 20000 attention_forward calls, q [32, 1, 4, 32], AMD EPYC (avx2 avx512_bf16 avx512f)
  // Zen 5 VM, 2026-11-29, three alternated runs, us a call, key by key / runs: Tk 15 18.7-19.5 /
  // 16.4-17.0; 24 26.8-26.9 / 24.8-25.9; 64 60.0-62.2 / 54.7-54.9. A cache that does not fit
  // stays key by key: in runs, Tq 1, H 8, D 128, f16, 2 threads, Tk 4096 took 0.21-0.25 ms ->
  // 0.22-0.32, 8192 0.47-0.53 -> 0.78-1.30 (`qkv bench --decode-only --decode-tk 4096 8192`).
  // Half of L2 is on the safe side: the driver's Tk 64 (1 MiB of K, read again call after call)
  // still gained, Tk 4096 (8 MiB) lost, and nothing between them was measured. A heads-first item
  // reads one k/v head, whose keys lie one after another, so its runs read K in order too: always
  // in runs. Without them, the split-length driver above (f16, Tq 1, Zen 4 VM, 2026-11-29) took
  // 1.15-1.17x the time at Tk 65536 and 1.17-1.20x at 16384, and GQA (Hq 32 over Hk 8) 1.17-1.19x.
  const bool runs = heads_first || static_cast<double>(d.B * d.Tk * d.Hk * d.D) *
                                           static_cast<double>(sizeof(*k.data)) <=
                                       0.5 * static_cast<double>(cpu_features().l2_bytes);
  // An item's keys go in runs of up to kRunTiles tiles, as many as keep its scores within
  // kRunScoreBytes: first every tile's scores, then each tile's softmax and P V in order, the same
  // arithmetic in the same order as a tile at a time, but K read for 512 keys before their V,
  // where a tile at a time alternated K and V every 64 keys. A driver alternating run lengths call
  // by call (qkv::attention_forward, heads-first cache, Hk 8, D 128, Tq 1, 2 threads, AMD EPYC
  // (family 25, model 17) Zen 4 VM, 2026-11-29, medians of 11-41 calls, two rounds), bf16 Hq 32
  // at Tk 65536, time over a tile at a time: 2 tiles 0.92-0.93, 4 0.85-0.86, 8 0.82; 16 and 32
  // tiles 0.93-0.94 and 0.92 of 8's time there, but 16 1.10-1.13 of 8's at Tk 4096 (in L3), where
  // 8 took 0.95-0.96 of a tile at a time. f16 Hq 32 at 65536: 8 tiles 0.85-0.87, Hq 8 0.97-0.98.
  // [B, T, H, D], whose tiles read every head's rows of each key, and shapes bound by their
  // arithmetic (Tq 16, or Hq 64 in f16) 0.97-1.03. The key-by-key step takes tiles as they come.
  constexpr std::int64_t kRunTiles = 8;
  constexpr std::int64_t kRunScoreBytes = std::int64_t{256} << 10;
  const std::int64_t longest_run = std::min(
      kRunTiles, (std::min(split_length, d.Tk) + TileTraits::kBlockK - 1) / TileTraits::kBlockK);
  const BlockView blocks(p.blocks);
#pragma omp parallel
  {
    ForwardScratch<T> scratch(d.Hq * d.Tq, 0, d.Dv);  // rows h * Tq + i; no Q rows
    const SoftmaxState<T> state = scratch.state();
    // Each head's kind of every tile of a run, each tile's step, and each tile's scores S [Hq *
    // Tq, kBk] (rows h * Tq + i).
    std::vector<TileKind> kinds(static_cast<std::size_t>(longest_run * d.Hq));
    enum class Step : std::uint8_t { none, online, tiles };
    std::vector<Step> step(static_cast<std::size_t>(longest_run));
    const std::int64_t tile_scores = d.Hq * d.Tq * kBk;
    const auto more_scores = hwy::AllocateAligned<T>(
        static_cast<std::size_t>(std::max<std::int64_t>((longest_run - 1) * tile_scores, 1)));
    std::fill(more_scores.get(), more_scores.get() + (longest_run - 1) * tile_scores, T(0));
    const auto scores_of = [&](std::int64_t t) {  // tile t of a run's S
      return t == 0 ? scratch.s.get() : more_scores.get() + (t - 1) * tile_scores;
    };
    // Every query row of a k/v head, live or not, enters the grouped products (rows past live
    // are computed and never read), so the choice depends on the shapes only; the bf16 dots
    // take their place where they are on.
    const bool grouped = d.group() * d.Tq >= kGroupedRows && !dots.on;
    const std::int64_t group_rows = d.group() * d.Tq;
    GroupScratch<T> products(grouped ? d.Hk : 0, group_rows, grouped ? d.D : 0, grouped ? d.Dv : 0);
    // Not with the bf16 dots, whose scores the backward recomputes: the tiles with them took 0.71
    // of the key-by-key step's time (Hq 32 over Hk 8, [B, T, H, D], bf16_dots.hpp).
    const bool online = d.group() * d.Tq < kOnlineRows && !dots.on && !heads_first &&
                        kv_elements > kOnlineMinElements && !p.dropout.enabled() &&
                        plain_scores(p.score_mod);
    // Whether the tile k-block kb of batch b is full for every query head. The key-by-key step
    // and the scores-softmax-values path agree only up to rounding, so the choice between them is
    // taken over all the heads, never the heads of one item: the items' head groups follow the
    // thread count ([B, T, H, D], above), and a mask that drops a key for one head only gave
    // other bits on 4 threads than on 1 (DecodeThreadCount.PerHeadMaskPastTheKeyByKeyThreshold).
    const auto every_head_full = [&](std::int64_t b, std::int64_t kb) {
      for (std::int64_t h = 0; h < d.Hq; ++h) {
        if (blocks.kind(b, h, 0, kb) != TileKind::full) return false;
      }
      return true;
    };
    const auto online_step = hwy::AllocateAligned<T>(static_cast<std::size_t>(
        online
            ? 5 * round_up(d.Hq * d.Tq, static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<T>())))
            : 1));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t group = item % groups;
      const std::int64_t split = item / groups % splits;
      const std::int64_t b = item / groups / splits;
      const HeadRange heads{group * kv_per_group * d.group(),
                            std::min((group + 1) * kv_per_group, d.Hk) * d.group()};
      const std::int64_t live = live_rows(p, b, 0, d.Tq);
      const std::int64_t k_end = std::min((split + 1) * split_length, d.Tk);
      state.rows_from(heads.lo * d.Tq, d.Dv).reset((heads.hi - heads.lo) * d.Tq, d.Dv);
      const std::int64_t hk_lo = heads.lo / d.group(), hk_hi = heads.hi / d.group();
      if (grouped) {
        for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
          group_queries(d, q_scaled.get(), b, hk, products.head_q(hk, group_rows, d.D));
        }
      }
      const std::int64_t item_rows = (heads.hi - heads.lo) * d.Tq;
      const std::int64_t run_tiles =
          online ? 1
                 : std::clamp<std::int64_t>(
                       kRunScoreBytes / (item_rows * kBk * static_cast<std::int64_t>(sizeof(T))), 1,
                       longest_run);
      for (std::int64_t run = split * split_length; run < k_end; run += run_tiles * kBk) {
        const std::int64_t tiles = std::min(run_tiles, (k_end - run + kBk - 1) / kBk);
        // Every tile's scores first, so that K is read for run_tiles tiles before V is.
        for (std::int64_t t = 0; t < tiles; ++t) {
          const std::int64_t j0 = run + t * kBk, cols = std::min(kBk, k_end - j0);
          TileKind* tile_kinds = kinds.data() + t * d.Hq;
          bool any = false;
          for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
            tile_kinds[h] = live > 0 ? blocks.kind(b, h, 0, j0 / kBk) : TileKind::empty;
            any = any || tile_kinds[h] != TileKind::empty;
          }
          step[t] = !any                                                     ? Step::none
                    : online && live == d.Tq && every_head_full(b, j0 / kBk) ? Step::online
                                                                             : Step::tiles;
          if (step[t] != Step::tiles) continue;
          T* S = scores_of(t);
          if (grouped) {
            grouped_scores(d, k, v, b, hk_lo, hk_hi, j0, cols, products, S);
          } else {
            decode_scores(p, k, v, q_scaled.get(), dots, b, heads, live, j0, cols, k_ahead, runs,
                          S);
          }
        }
        // Then each tile's softmax and P V in order: the arithmetic of a tile at a time.
        for (std::int64_t t = 0; t < tiles; ++t) {
          const std::int64_t j0 = run + t * kBk, cols = std::min(kBk, k_end - j0);
          const TileKind* tile_kinds = kinds.data() + t * d.Hq;
          T* S = scores_of(t);
          if (step[t] == Step::none) continue;
          if (step[t] == Step::online) {
            decode_online(d, k, v, q_scaled.get(), b, heads, j0, cols, k_ahead, state,
                          online_step.get());
            continue;
          }
          decode_softmax(p, b, heads, live, j0, cols, tile_kinds, S, scratch.z.get(), state);
          if (!grouped) {
            decode_values(p, v, dots, b, heads, live, j0, cols, tile_kinds, S, state.acc);
            continue;
          }
          for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
            const HeadRange group_heads{hk * d.group(), (hk + 1) * d.group()};
            const bool all_full =
                std::all_of(tile_kinds + group_heads.lo, tile_kinds + group_heads.hi,
                            [](TileKind kind) { return kind == TileKind::full; });
            if (all_full) {
              grouped_values(d, v, b, hk, j0, cols, products, S, state.acc);
            } else {
              decode_values(p, v, dots, b, group_heads, live, j0, cols, tile_kinds, S, state.acc);
            }
          }
        }
      }
      for (std::int64_t h = heads.lo; h < heads.hi; ++h) {
        for (std::int64_t i = 0; i < d.Tq; ++i) {
          if (one_split) {
            state.finalize(h * d.Tq + i, d.Dv, live_rows(p, b, i, 1) == 0, p.out.at(b, i, h),
                           p.lse(b, h, i));
            continue;
          }
          const std::int64_t at = ((b * d.Hq + h) * d.Tq + i) * splits + split;
          part_m[at] = state.m[h * d.Tq + i];
          part_l[at] = state.l[h * d.Tq + i];
          std::copy_n(state.acc + (h * d.Tq + i) * d.Dv, d.Dv, part_acc.get() + at * d.Dv);
        }
      }
    }
  }
  if (one_split) return;
    // Each row's partial states merged, in split order, into its out row, then finalized in place.
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t i = row % d.Tq;
    const std::int64_t h = row / d.Tq % d.Hq;
    const std::int64_t b = row / d.Tq / d.Hq;
    T m = 0, l = 0;
    const SoftmaxState<T> merged{p.out.at(b, i, h), &m, &l};
    merged.merge(0, d.Dv, splits, part_m.get() + row * splits, part_l.get() + row * splits,
                 part_acc.get() + row * splits * d.Dv);
    merged.finalize(0, d.Dv, live_rows(p, b, i, 1) == 0, merged.acc, p.lse(b, h, i));
  }
}

// K and V where the params say: a 16-bit cache (p.half_kv) or p.k and p.v.
template <class T, class ScoreMod, class MaskMod>
void decode_any(const FwdParams<T, ScoreMod, MaskMod>& p) {
  if constexpr (std::is_same_v<T, float>) {
    if (visit_half(p.half_kv, [&](const auto& k, const auto& v) { decode_impl(p, k, v); })) return;
  }
  decode_impl(p, p.k, p.v);
}

void DecodeF32(const FwdParams<float>& p) { decode_any(p); }
void DecodeF64(const FwdParams<double>& p) { decode_any(p); }
void FlexDecodeF32(const FlexFwdParams<float>& p) { decode_any(p); }
void FlexDecodeF64(const FlexFwdParams<double>& p) { decode_any(p); }

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(DecodeF32);
HWY_EXPORT(DecodeF64);
HWY_EXPORT(FlexDecodeF32);
HWY_EXPORT(FlexDecodeF64);

template <>
void decode(const FwdParams<float>& params) {
  HWY_DYNAMIC_DISPATCH(DecodeF32)(params);
}

template <>
void decode(const FwdParams<double>& params) {
  HWY_DYNAMIC_DISPATCH(DecodeF64)(params);
}

template <>
void decode(const FlexFwdParams<float>& params) {
  HWY_DYNAMIC_DISPATCH(FlexDecodeF32)(params);
}

template <>
void decode(const FlexFwdParams<double>& params) {
  HWY_DYNAMIC_DISPATCH(FlexDecodeF64)(params);
}

}  // namespace qkv::kernels::cpu
#endif
