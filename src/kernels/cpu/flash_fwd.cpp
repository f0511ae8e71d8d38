// The fused forward: tiled online softmax. For each (b, h, q-block) the score tile S = (scale Q)
// K^T of one k-block at a time is turned into probabilities against a running row max, the output
// accumulator is rescaled when the max moves, and one division at the end normalizes it. The
// Tq x Tk matrix never exists; lse is saved for the backward. The state is softmax_state-inl.h's;
// problems of a few queries (decode) go to flash_decode.cpp instead.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/flash_fwd.cpp"
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/block_view.hpp"
#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/decode.hpp"
#include "kernels/cpu/entry.hpp"
#include "kernels/cpu/gemm-inl.h"
#include "kernels/cpu/key_tiles-inl.h"
#include "kernels/cpu/large_buffer.hpp"
#include "kernels/cpu/pair_tiles.hpp"
#include "kernels/cpu/round_bf16-inl.h"
#include "kernels/cpu/softmax_state-inl.h"
#include "kernels/cpu/tile-inl.h"
#include "kernels/cpu/upcoming.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

constexpr std::int64_t kBq = TileTraits::kForwardBlockQ;  // the most rows of a q-block

// acc [live, Dv] += P V over the pairs the mask keeps only, for rows [i0, i0 + live) of head h
// and keys [j0, j0 + cols) of batch b, with P [live, kBk] and this tile of V [kBk, Dv]. For
// partial tiles whose V holds an inf or NaN: the product would add 0 * NaN = NaN into the rows
// that drop the key.
template <class T, class ScoreMod, class MaskMod>
void values_kept(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t h,
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

// The products of the f32 path: S = (scale Q) K^T and acc += P V in f32 FMA, from KeyTiles
// (K and V in T, or a 16-bit cache converted as it is packed).
template <class T, class ScoreMod, class MaskMod>
class F32Products {
 public:
  F32Products(const FwdParams<T, ScoreMod, MaskMod>& p, KeyTiles<T>& keys,
              ForwardScratch<T>& scratch)
      : p_(p), keys_(keys), q_(scratch.q.get()) {}

  // q_ [live, D] <- scale * Q of rows [i0, i0 + live) of head h of batch b.
  void rows(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t live) {
    scale_rows(p_.q.at(b, i0, h), p_.q.row, live, p_.dims.D, p_.scale, q_);
  }
  // The rows rows() reads, added to `ahead`.
  void ask_rows(Upcoming& ahead, std::int64_t b, std::int64_t h, std::int64_t i0,
                std::int64_t live) const {
    ahead.add(p_.q.at(b, i0, h), p_.q.row * sizeof(T), live, p_.dims.D * sizeof(T), false);
  }
  void ensure(std::int64_t head_kv, std::int64_t kb, std::int64_t ahead) {
    keys_.ensure(head_kv, kb, ahead);
  }
  // P reaches V in T, from s; every tile goes the per-tile way.
  std::uint16_t* rounded() { return nullptr; }
  ExpRoundRow native_rounding() const { return nullptr; }
  static constexpr std::int64_t kWideTiles = 1;
  // For the partial tile of keys [j0, j0 + cols) that rows [i0, i0 + n) of head h of batch b
  // read next, with kinds [ceil(n / kBlockQ)] the tile's kinds in their halves: where a whole
  // group of kGroupRows rows keeps keys of the tile only within columns [lo, hi) (a causal
  // diagonal's upper rows, a window's edges), the next scores() and values() take only those
  // columns for that group. The built-in masks bound each row's keys by its interval (which a
  // keep-mask tensor only thins); a flex mask by its kept bits where the drop cache has them
  // (`kept`, [n]), else by its hull (masks::key_hull) where it has one. The scores left out lie
  // outside every kept key of their rows, so the mask overwrites them; the products left out would
  // add P = 0 times a finite value (a tile with a non-finite value goes values_kept's way): the
  // same bits.
  void narrow(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t n, std::int64_t j0,
              std::int64_t cols, const TileKind* kinds, const std::uint64_t* kept) {
    if constexpr (std::is_same_v<MaskMod, BuiltinMask>) {
      narrow_by(n, cols, [&](std::int64_t r) {
        const KeyRange keys = p_.mask_mod.interval(b, h, i0 + r);
        return KeyRange{keys.lo - j0, keys.hi - j0};
      });
    } else if constexpr (std::is_same_v<MaskMod, FlexMask>) {
      if (kept != nullptr) {
        narrow_by(n, cols, [&](std::int64_t r) {
          if (kinds[r / TileTraits::kBlockQ] == TileKind::full) return KeyRange{0, cols};
          const std::uint64_t bits = kept[r];
          if (bits == 0) return KeyRange{0, 0};
          return KeyRange{std::countr_zero(bits), 64 - std::countl_zero(bits)};
        });
      } else if (p_.mask_mod.erased->hull != nullptr) {
        narrow_by(n, cols, [&](std::int64_t r) {
          const KeyRange keys = p_.mask_mod.hull(b, h, i0 + r, j0, j0 + cols);
          return KeyRange{keys.lo - j0, keys.hi - j0};
        });
      }
    }
  }
  // s [n, kBk] <- (scale Q) K^T for tile kb, the q-block's rows [r0, r0 + n) (the pack's zero
  // padding fills columns past Tk).
  void scores(std::int64_t head_kv, std::int64_t kb, std::int64_t r0, std::int64_t n, T* s) {
    const std::int64_t dim = p_.dims.D;
    const T* kt = keys_.kt(head_kv, kb);
    if (!narrowed_) return gemm<true>(n, kBk, dim, q_ + r0 * dim, dim, kt, kBk, s, kBk, false);
    // Whole strips of the product (two vectors) over each group's columns.
    const auto strip = static_cast<std::int64_t>(2 * hn::Lanes(hn::ScalableTag<T>()));
    for (std::int64_t g = 0; g * kGroupRows < n; ++g) {
      const std::int64_t m = std::min(kGroupRows, n - g * kGroupRows);
      const std::int64_t c0 = spans_[g].lo / strip * strip;
      const std::int64_t c1 = std::min(kBk, round_up(spans_[g].hi, strip));
      if (c1 <= c0) continue;
      gemm<true>(m, c1 - c0, dim, q_ + (r0 + g * kGroupRows) * dim, dim, kt + c0, kBk,
                 s + g * kGroupRows * kBk + c0, kBk, false);
    }
  }
  // acc [n, Dv] += P V for tile kb, with P [n, kBk] in s, for the rows [i0, i0 + n) of head h
  // (acc: their rows of the state).
  void values(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t n, std::int64_t head_kv,
              std::int64_t kb, std::int64_t cols, bool all_full, const T* s, T* acc) {
    const T* vt = keys_.vt(head_kv, kb);
    const std::int64_t dim_v = p_.dims.Dv;
    const bool narrowed = narrowed_;
    narrowed_ = false;
    if (!all_full && !keys_.v_finite(head_kv, kb)) {
      values_kept(p_, b, h, i0, n, kb * kBk, cols, s, vt, acc);
    } else if (!narrowed) {
      gemm(n, dim_v, cols, s, kBk, vt, dim_v, acc, dim_v, true);
    } else {
      for (std::int64_t g = 0; g * kGroupRows < n; ++g) {
        const std::int64_t m = std::min(kGroupRows, n - g * kGroupRows);
        const KeyRange keys = spans_[g];
        if (keys.hi <= keys.lo) continue;
        gemm(m, dim_v, keys.hi - keys.lo, s + g * kGroupRows * kBk + keys.lo, kBk,
             vt + keys.lo * dim_v, dim_v, acc + g * kGroupRows * dim_v, dim_v, true);
      }
    }
  }

 private:
  // spans_ [groups] <- the columns [lo, hi) within [0, cols) of each group's rows, from row_keys(r)
  // (a superset of row r's kept columns, before clamping; empty for a row that keeps none), and
  // narrowed_ <- whether any group is narrower than the tile.
  template <class RowKeys>
  void narrow_by(std::int64_t n, std::int64_t cols, RowKeys row_keys) {
    bool narrower = false;
    for (std::int64_t g = 0; g * kGroupRows < n; ++g) {
      std::int64_t lo = cols, hi = 0;
      for (std::int64_t r = g * kGroupRows; r < std::min(n, (g + 1) * kGroupRows); ++r) {
        const KeyRange keys = row_keys(r);
        const std::int64_t a = std::clamp<std::int64_t>(keys.lo, 0, cols);
        const std::int64_t z = std::clamp<std::int64_t>(keys.hi, 0, cols);
        if (a >= z) continue;
        lo = std::min(lo, a);
        hi = std::max(hi, z);
      }
      if (lo >= hi) lo = hi = 0;
      spans_[g] = {lo, hi};
      narrower = narrower || hi - lo < cols;
    }
    narrowed_ = narrower;
  }

  // Rows per group of narrow(). `qkv bench --peak --T 2048 4096 --D 64 --pass fwd --threads 1`,
  // AMD EPYC (avx2 avx512_bf16 avx512f), 2026-11-28, alternated runs, % of the FMA burst during
  // the row, causal T 2048 / 4096: without narrowing 67.6-69.0 / 72.3-73.7 (four runs); groups of
  // 16 rows 68.2-69.5 / 73.0-74.4 (four), then 8, 16 and 32 rows three runs each: 68.4-71.8 /
  // 72.9-74.5, 67.4-70.4 / 73.5-74.5, 68.7-69.8 / 73.1-75.5, the same within the noise.
  static constexpr std::int64_t kGroupRows = 16;
  KeyRange spans_[kBq / kGroupRows] = {};
  bool narrowed_ = false;
  const FwdParams<T, ScoreMod, MaskMod>& p_;
  KeyTiles<T>& keys_;
  T* q_;
};

// The products of the bf16 path (q, k and v all bf16, T = float): S = Q K^T from the bf16 values
// as they lie, then scaled in f32, and acc += P V with P rounded to bf16 (by the softmax, into
// rounded()), both on the machine's matrix units (bf16_gemm.hpp) with f32 accumulation, P V added
// into acc by the product itself where Dv is whole C tiles. The softmax between them is the f32
// path's. Runs of up to kWideTiles full tiles without score mods or dropout go through wide() as
// one softmax step of their keys side by side (see kWideTiles). One per thread: it holds the
// thread's tile configuration (MatrixTileScope) while it lives.
template <class ScoreMod, class MaskMod>
class Bf16Products {
 public:
  // Tiles of keys per wide step. The per-row work of the softmax (the row's max and sum across
  // lanes, the rescaling factor, the loop itself) is paid once per step instead of per 64 keys,
  // and P V runs over 4x the depth per C tile. `qkv bench --dtype bf16 --pass fwd --T 1024 4096
  // --reps 7`, B 1, H 8, 2 threads of an Intel Xeon (AVX512-BF16, AMX), 2026-11-27, builds with
  // 2 / 4 / 8 tiles alternated twice, ms (T, D, causal): 4096 64 no 71.2 66.2 / 62.4 59.0 / 64.5
  // 64.2; 4096 64 yes 40.7 42.2 / 40.5 39.4 / 38.7 38.2; 4096 128 no 111 102 / 97.2 96.2 / 102
  // 96.2; 4096 128 yes 67.2 68.1 / 61.6 61.0 / 58.3 58.0; 1024 64 no 7.8 7.0 / 6.0 5.8 / 6.9 6.4;
  // 1024 128 no 10.3 10.7 / 8.8 8.2 / 7.9 8.3. 2 loses everywhere; 8 wins causal D 128 by 5% and
  // loses T 1024 D 64 by 10% (128-row blocks: a [128, 512] f32 score buffer, 256 KiB); 4 stays.
  static constexpr std::int64_t kWideTiles = 4;

  Bf16Products(const FwdParams<float, ScoreMod, MaskMod>& p, PairTiles& pairs, MatrixPath path,
               std::int64_t block)
      : p_(p),
        pairs_(pairs),
        path_(path),
        wide_(plain_scores(p.score_mod) && !p.dropout.enabled()),
        native_(native_exp_round_row()),
        row_tiles_max_((block + kUnitRows - 1) / kUnitRows),
        q_(static_cast<size_t>(row_tiles_max_ * kUnitRows * pairs.depth())),
        p16_(static_cast<size_t>(row_tiles_max_ * kUnitRows * kBk * kWideTiles)),
        c_(hwy::AllocateAligned<float>(row_tiles_max_ * kUnitRows *
                                       std::max(kBk * kWideTiles, pairs.cols_v()))) {}

  // How many tiles from kb (before kb_end) wide() takes in one step: the run of tiles that are
  // whole (kBk keys) and full in every q-block half of these rows, at most kWideTiles; 1 or 0
  // means the tile goes the per-tile way.
  std::int64_t wide_tiles(const BlockView& blocks, std::int64_t b, std::int64_t h, std::int64_t qb0,
                          std::int64_t halves, std::int64_t kb, std::int64_t kb_end) const {
    if (!wide_) return 0;
    std::int64_t g = 0;
    for (; g < kWideTiles && kb + g < kb_end && (kb + g + 1) * kBk <= p_.dims.Tk; ++g) {
      for (std::int64_t x = 0; x < halves; ++x) {
        if (blocks.kind(b, h, qb0 + x, kb + g) != TileKind::full) return g;
      }
    }
    return g;
  }

  // The tiles [kb, kb + g) of k/v head head_kv (packed), full for rows [0, live): S = scale * Q
  // K^T side by side in c_ [live, g kBk], the state's absorb of the whole width (P in bf16 in
  // p16_), and acc += P V over the g kBk keys (V's pairs of consecutive tiles are consecutive).
  void wide(std::int64_t live, std::int64_t head_kv, std::int64_t kb, std::int64_t g,
            const SoftmaxState<float>& state) {
    const std::int64_t width = g * kBk, depth = pairs_.depth();
    for (std::int64_t t = 0; t < g; ++t) {
      bf16_gemm(path_, row_tiles_, kBk / kUnitCols, depth / kUnitDepth, q_.data(), depth,
                pairs_.kp(head_kv, kb + t), c_.get() + t * kBk, width);
    }
    if (native_ != nullptr && p_.scale > 0 && std::isfinite(p_.scale)) {
      state.absorb(c_.get(), live, p_.dims.Dv, p16_.data(), width, p_.scale, native_);
    } else {
      scale_rows(c_.get(), width, live, width, p_.scale, c_.get());
      state.absorb(c_.get(), live, p_.dims.Dv, p16_.data(), width);
    }
    std::fill(p16_.begin() + live * width, p16_.begin() + row_tiles_ * kUnitRows * width,
              std::uint16_t{0});
    add_values(row_tiles_, live, width, pairs_.vp(head_kv, kb), state.acc);
  }

  // q_ [live rounded up to 16, D32] <- Q's bf16 rows, zero past D and live.
  void rows(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t live) {
    row_tiles_ = (live + kUnitRows - 1) / kUnitRows;
    const std::int64_t depth = pairs_.depth();
    std::fill(q_.begin(), q_.begin() + row_tiles_ * kUnitRows * depth, std::uint16_t{0});
    for (std::int64_t r = 0; r < live; ++r) {
      std::copy_n(p_.half_kv.q.at(b, i0 + r, h), p_.dims.D, q_.data() + r * depth);
    }
  }
  // The rows rows() reads, added to `ahead`.
  void ask_rows(Upcoming& ahead, std::int64_t b, std::int64_t h, std::int64_t i0,
                std::int64_t live) const {
    ahead.add(p_.half_kv.q.at(b, i0, h), p_.half_kv.q.row * 2, live, p_.dims.D * 2, false);
  }
  void ensure(std::int64_t head_kv, std::int64_t kb, std::int64_t ahead) {
    pairs_.ensure(head_kv, kb, ahead);
  }
  // P [live, kBk] in bf16, as the softmax leaves it for values(), rounded by native_rounding().
  std::uint16_t* rounded() { return p16_.data(); }
  ExpRoundRow native_rounding() const { return native_; }
  // s [n, kBk] <- scale * (Q K^T) for tile kb, the q-block's rows [r0, r0 + n) (r0 a multiple
  // of kUnitRows; columns past Tk: 0, from the zero pairs).
  void scores(std::int64_t head_kv, std::int64_t kb, std::int64_t r0, std::int64_t n, float* s) {
    tiles_ = (n + kUnitRows - 1) / kUnitRows;
    bf16_gemm(path_, tiles_, kBk / kUnitCols, pairs_.depth() / kUnitDepth,
              q_.data() + r0 * pairs_.depth(), pairs_.depth(), pairs_.kp(head_kv, kb), c_.get(),
              kBk);
    scale_rows(c_.get(), kBk, n, kBk, p_.scale, s);
  }
  // acc [n, Dv] += P V for tile kb, with P in rounded(), for the rows [i0, i0 + n) of head h that
  // the last scores() took (acc: their rows of the state; its rows past n, up to whole tiles,
  // take P's zero rows: scratch rows nothing reads).
  void values(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t n, std::int64_t head_kv,
              std::int64_t kb, std::int64_t cols, bool all_full, const float*, float* acc) {
    const std::int64_t dim_v = p_.dims.Dv;
    if (!all_full && !pairs_.v_finite(head_kv, kb)) {
      // As values_kept: a dropped key's non-finite value never meets its P = 0.
      for (std::int64_t r = 0; r < n; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          if (!p_.mask_mod(b, h, i0 + r, kb * kBk + c)) continue;
          const float pr = bf16_bits_to_f32(p16_[r * kBk + c]);
          for (std::int64_t x = 0; x < dim_v; ++x) {
            acc[r * dim_v + x] += pr * pairs_.v_at(head_kv, kb, c, x);
          }
        }
      }
      return;
    }
    std::fill(p16_.begin() + n * kBk, p16_.begin() + tiles_ * kUnitRows * kBk, std::uint16_t{0});
    add_values(tiles_, n, kBk, pairs_.vp(head_kv, kb), acc);
  }

 private:
  // acc [live, Dv] += P V, P in p16_ [live, keys] (zero rows past live up to `tiles` whole
  // tiles), vp the pairs of V's keys.
  void add_values(std::int64_t tiles, std::int64_t live, std::int64_t keys, const std::uint16_t* vp,
                  float* acc) {
    const std::int64_t dim_v = p_.dims.Dv, cols_v = pairs_.cols_v();
    if (cols_v == dim_v) {
      bf16_gemm(path_, tiles, cols_v / kUnitCols, keys / kUnitDepth, p16_.data(), keys, vp, acc,
                dim_v, /*accumulate=*/true);
      return;
    }
    bf16_gemm(path_, tiles, cols_v / kUnitCols, keys / kUnitDepth, p16_.data(), keys, vp, c_.get(),
              cols_v);
    for (std::int64_t r = 0; r < live; ++r) {
      axpy(1.0f, c_.get() + r * cols_v, acc + r * dim_v, dim_v);
    }
  }

  const FwdParams<float, ScoreMod, MaskMod>& p_;
  PairTiles& pairs_;
  MatrixPath path_;
  bool wide_;
  ExpRoundRow native_;  // the CPU's own bf16 rounding in the softmax's pass, where it has it
  MatrixTileScope tile_scope_;
  std::int64_t row_tiles_max_, row_tiles_ = 0;
  std::int64_t tiles_ = 0;  // row tiles of the last scores()
  std::vector<std::uint16_t> q_, p16_;
  hwy::AlignedFreeUniquePtr<float[]> c_;  // aligned: the softmax's row passes load whole vectors
};

// Folds every key into `state`, the online-softmax state of rows [i0, i0 + live) of head h of
// batch b, from the tiles of its k/v head through `products` (F32Products or Bf16Products). Tiles
// the mask empties are skipped (and never packed). ahead: lines asked of the cache as the tiles'
// softmax rows go by (softmax_tile), or null. bits: a lambda's partial tiles for one-q-block rows
// (PartialTileBits), or null (the DropCache serves them where it can).
template <class T, class ScoreMod, class MaskMod, class Products>
void attend_keys(const FwdParams<T, ScoreMod, MaskMod>& p, Products& products, std::int64_t b,
                 std::int64_t h, std::int64_t i0, std::int64_t live, ForwardScratch<T>& scratch,
                 const SoftmaxState<T>& state, Upcoming* ahead, const PartialTileBits* bits) {
  const Dims& d = p.dims;
  if (live == 0) return;
  products.rows(b, h, i0, live);
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
  const std::int64_t head_kv = b * d.Hk + h / d.group();
  const bool cached_drops = DropCache::serves(p.mask_mod, *p.blocks);
  for (std::int64_t kb = span.lo; kb < span.hi; ++kb) {
    if constexpr (Products::kWideTiles > 1) {
      const std::int64_t g = products.wide_tiles(blocks, b, h, qb0, halves, kb, span.hi);
      if (g > 1) {
        for (std::int64_t t = 0; t < g; ++t) {
          products.ensure(head_kv, kb + t, kb + t + 1 < span.hi ? kb + t + 1 : -1);
        }
        products.wide(live, head_kv, kb, g, state);
        kb += g - 1;
        continue;
      }
    }
    const std::int64_t j0 = kb * kBk;
    const std::int64_t cols = std::min(kBk, d.Tk - j0);
    bool any = false, all_full = true;
    for (std::int64_t x = 0; x < halves; ++x) {
      kinds[x] = blocks.kind(b, h, qb0 + x, kb);
      any = any || kinds[x] != TileKind::empty;
      all_full = all_full && kinds[x] == TileKind::full;
    }
    if (!any) continue;
    // Two threads on one head's first q-blocks need the same tiles one after the other: the one
    // that finds its tile being packed packs the next meanwhile, rather than wait for every tile
    // (`qkv bench --peak --T 2048 4096 --D 64 --pass fwd --threads 2`, AMD EPYC (avx2
    // avx512_bf16 avx512f), 2026-11-28, three alternated runs, % of the FMA burst: causal T 2048
    // 61.3-62.2 -> 65.4-66.4, T 4096 69.5-70.0 -> 70.7-71.7; full rows unchanged).
    bool next = false;
    for (std::int64_t x = 0; kb + 1 < span.hi && x < halves; ++x) {
      next = next || blocks.kind(b, h, qb0 + x, kb + 1) != TileKind::empty;
    }
    products.ensure(head_kv, kb, next ? kb + 1 : -1);
    // Only the rows of the halves from the first to the last that keep a key of this tile (a
    // causal diagonal's upper half keeps none of the second tile): the rows skipped would add
    // nothing to their state. `qkv bench --peak --T 2048 4096 --D 64 --pass fwd --threads 1`,
    // AMD EPYC (avx2 avx512_bf16 avx512f), 2026-11-28, four alternated runs, causal T 4096 (128-row
    // blocks) at 71.4-72.2% of the FMA burst during the row -> 72.8-73.5%; other rows unchanged.
    std::int64_t x0 = 0, x1 = halves;
    while (kinds[x0] == TileKind::empty) ++x0;
    while (kinds[x1 - 1] == TileKind::empty) --x1;
    const std::int64_t r0 = x0 * TileTraits::kBlockQ;
    const std::int64_t n = std::min(live, x1 * TileTraits::kBlockQ) - r0;
    const std::uint64_t* kept = nullptr;
    if constexpr (std::is_same_v<MaskMod, FlexMask>) {
      if (bits != nullptr && !all_full) {
        kept = bits->find(b, qb0, kb);
      } else if (cached_drops && !all_full) {
        // The whole q-block's rows, as the thread's other heads ask for them.
        kept =
            scratch.drops.template tile<T>(p.mask_mod, *p.blocks, b, h, i0, live, j0, cols, kinds) +
            r0;
      }
    }
    T* s = scratch.s.get();
    const SoftmaxState<T> rows = state.rows_from(r0, d.Dv);
    if constexpr (requires { products.narrow(b, h, i0, n, j0, cols, kinds, kept); }) {
      if (!all_full) products.narrow(b, h, i0 + r0, n, j0, cols, kinds + x0, kept);
    }
    products.scores(head_kv, kb, r0, n, s);
    softmax_tile(p, b, h, i0 + r0, n, j0, cols, kinds + x0, s, scratch.z.get(), rows,
                 products.rounded(), products.native_rounding(), kept, ahead);
    products.values(b, h, i0 + r0, n, head_kv, kb, cols, all_full, s, rows.acc);
  }
}

// A forward item: rows [i0, i0 + rows) of head h of batch b.
struct ForwardItem {
  std::int64_t b = 0, h = 0, i0 = 0, rows = 0;
};

// Adds to `ahead` the rows of Q that item `next` reads (through `products`: F32Products or
// Bf16Products) and of the output it writes, spread over the softmax rows of the tiles of item
// `now` (live rows). For sparse masks walked head by head, whose items are one q-block each: a
// window's q-block reads 5 tiles, and its 64 rows of Q and of the output lie 2 KiB apart in [B,
// T, H, D] (T = 8192, H = 8, D = 64), so that reading them waited on memory between the tiles'
// products. Time over full x kept tiles (T = 8192, H = 8, D = 64, 2 threads, a driver alternating
// full and the pattern call by call, medians of 9 pairs, AMD EPYC (avx2 avx512_bf16 avx512f) Zen
// 5 VM, 2026-11-28, builds alternated, five rounds on a quiet host): window 1.227-1.232 ->
// 1.166-1.177; BigBird 1.169-1.172 -> 1.138-1.145; Longformer 1.107-1.111 -> 1.065-1.069; 8
// documents 1.080-1.090 -> 1.065-1.085. Not kept: also asking for the next item's new tiles
// (packed, or the rows of K and V they are packed from): every pattern 2-5% slower; claiming
// each thread's next item as it starts one, so that `next` is known rather than guessed as item +
// threads: the threads then took q-blocks in pairs instead of in turn, and the window went from
// 1.23 to 1.30 before any prefetch; the same for heads walked inside q-blocks (the window as a
// lambda): 1.256-1.263 -> 1.300-1.308.
template <class T, class ScoreMod, class MaskMod, class Products>
void ask_ahead(const FwdParams<T, ScoreMod, MaskMod>& p, const Products& products,
               const ForwardItem& now, std::int64_t live, const ForwardItem& next,
               Upcoming& ahead) {
  const Dims& d = p.dims;
  const BlockView blocks(p.blocks);
  const auto size = static_cast<std::int64_t>(sizeof(T));
  const std::int64_t next_live = live_rows(p, next.b, next.i0, next.rows);
  if (next_live > 0) products.ask_rows(ahead, next.b, next.h, next.i0, next_live);
  ahead.add(p.out.at(next.b, next.i0, next.h), p.out.row * size, next.rows, d.Dv * size, true);
  const std::int64_t qb = now.i0 / TileTraits::kBlockQ;
  std::int64_t tiles = 0;
  const KeyRange span = live > 0 ? blocks.k_span(now.b, now.h, qb) : KeyRange{};
  for (std::int64_t kb = span.lo; kb < span.hi; ++kb) {
    tiles += blocks.kind(now.b, now.h, qb, kb) != TileKind::empty;
  }
  ahead.pace(tiles * live);
}

// Prefill and training shapes: K^T and V packed once per call (KeyTiles), work split over
// (b, h, q-block). Under a sparse mask walked head by head, a thread asks the cache for the rows
// of the item it will likely take next (items are dealt in turn: this one + threads) during this
// one's tiles.
template <class T, class ScoreMod, class MaskMod, class MakeProducts>
void forward_blocks(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t block, bool sparse,
                    bool heads_inner, const PartialTileBits* bits,
                    const MakeProducts& make_products) {
  const Dims& d = p.dims;
  const std::int64_t q_blocks = (d.Tq + block - 1) / block;
  const std::int64_t heads = d.B * d.Hq;
  const std::int64_t items = heads * q_blocks;
  // Last q-blocks first: under a causal mask they are the heaviest, so the light ones fill in at
  // the end.
  const auto locate = [&](std::int64_t item) {
    const std::int64_t i0 = (q_blocks - 1 - (heads_inner ? item / heads : item % q_blocks)) * block;
    const std::int64_t bh = heads_inner ? item % heads : item / q_blocks;
    return ForwardItem{bh / d.Hq, bh % d.Hq, i0, std::min(block, d.Tq - i0)};
  };
#pragma omp parallel
  {
    ForwardScratch<T> scratch(block, d.D, d.Dv);
    const SoftmaxState<T> state = scratch.state();
    auto products = make_products(scratch);
    const std::int64_t threads = omp_get_num_threads();
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t following = sparse && !heads_inner ? item + threads : items;
      const ForwardItem at = locate(item);
      const std::int64_t live = live_rows(p, at.b, at.i0, at.rows);
      Upcoming ahead;
      if (following < items) ask_ahead(p, products, at, live, locate(following), ahead);
      state.reset(at.rows, d.Dv);
      attend_keys(p, products, at.b, at.h, at.i0, live, scratch, state,
                  following < items ? &ahead : nullptr, bits);
      write_rows(p, at.b, at.h, at.i0, at.rows, live, state);
    }
  }
}

// Whether a sparse mask's items go q-block by q-block, every head of one before the next
// (forward_blocks' heads_inner), rather than head by head. Heads inside: the heads' rows of a [B,
// T, H, D] tensor lie side by side, so consecutive items read Q, K and V and write the output in
// the same pages. Heads outside: a head's consecutive q-blocks share tiles (a window's, global
// tokens'), which stay in the core's L2 only if the items between two uses of a tile do not push
// it out; walking the heads inside, that is a round of heads, ceil(B Hq / threads) items a
// thread, each reading its q-block's kept tiles of K^T and V (element_bytes each). So the heads go
// inside while such a round's tiles fill at most half of L2, and always for a mask whose partial
// tiles' bits the DropCache keeps for the next heads of the same rows (a lambda's) unless they were
// computed for the whole call (bits: PartialTileBits, forward_tiled). Measured, T =
// 8192, H = 8, D = 64, f32, 2 threads, time over full x kept tiles (`qkv bench --variants --T
// 8192 --pass fwd --threads 2`, builds alternated), heads inside -> outside:
// - Intel Xeon VM (AVX-512, AMX; 2 MiB of L2 a core), 2026-11-27: window 1.39, 1.41 -> 1.50,
//   1.51; Longformer 1.41 either way; BigBird 1.29-1.32 either way. Rounds of ~0.6 / 0.9 / 1.3
//   MiB: under half of L2 but BigBird's.
// - AMD EPYC (avx2 avx512_bf16 avx512f) Zen 5 VM (1 MiB of L2), 2026-11-28, three runs each:
//   window 1.28, 1.21, 1.29 -> 1.24, 1.24, 1.25; Longformer 1.17, 1.12, 1.19 -> 1.11, 1.19, 1.16;
//   BigBird 1.34, 1.32, 1.33 -> 1.18, 1.25, 1.24; 8 documents 1.10 -> 1.07-1.10 (every round over
//   half of L2 there); the window as a lambda 1.28, 1.31, 1.23 -> 1.39, 1.43, 1.38.
template <class T, class ScoreMod, class MaskMod>
bool heads_inside(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t element_bytes,
                  const PartialTileBits* bits) {
  const Dims& d = p.dims;
  const BlockView blocks(p.blocks);
  if (bits == nullptr && DropCache::serves(p.mask_mod, *p.blocks) &&
      blocks.count(TileKind::partial) > 0) {
    return true;
  }
  const std::int64_t threads = omp_get_max_threads();
  const double round_bytes = static_cast<double>((d.B * d.Hq + threads - 1) / threads) *
                             blocks.kept_per_q_block() *
                             static_cast<double>(kBk * (d.D + d.Dv) * element_bytes);
  return round_bytes <= 0.5 * static_cast<double>(cpu_features().l2_bytes);
}

// Prefill and training shapes: K and V packed once per call (KeyTiles, or PairTiles for the bf16
// products), work split over (b, h, q-block).
template <class T, class ScoreMod, class MaskMod>
void forward_tiled(const FwdParams<T, ScoreMod, MaskMod>& p) {
  const Dims& d = p.dims;
  // A sparse mask (most tiles empty) keeps 64-row blocks: a 128-row block computes the union of
  // its two halves' tiles, and its K and V tiles fit the cache anyway (qkv bench --variants, T =
  // 8192, fwd, AMD EPYC Zen 3: bigbird's time over full x kept tiles was 2.06 with 128 rows). Its
  // items' order: heads_inside.
  const bool sparse = BlockView(p.blocks).sparse();
  // A lambda's partial tiles (drop_cache-inl.h), their kept bits once for all heads, so that its
  // items may go head by head, as the built-in masks' do, and ask ahead for their rows. The
  // window as a lambda's time over full x kept tiles (T = 8192 / 16384, the same driver as
  // ask_ahead's, AMD EPYC (avx2 avx512_bf16 avx512f), 2026-11-28, builds alternated, quiet
  // rounds): heads inside with the DropCache 1.264, 1.265 / 1.265 -> head by head with these bits
  // 1.179, 1.185 / 1.200, where the built-in window took 1.170, 1.171 / 1.191.
  const std::optional<PartialTileBits> bits =
      sparse ? partial_tile_bits<T>(p.mask_mod, *p.blocks) : std::nullopt;
  const PartialTileBits* partial_bits = bits ? &*bits : nullptr;
  const std::int64_t block =
      sparse
          ? TileTraits::kBlockQ
          : TileTraits::forward_block_q(d.Tk * (d.D + d.Dv) * static_cast<std::int64_t>(sizeof(T)));
  if constexpr (std::is_same_v<T, float>) {
    MatrixPath path;
    if (p.half_kv.kind == HalfKind::bf16 && p.half_kv.q.data != nullptr &&
        fused_bf16_path(d.Tk, path)) {
      PairTiles pairs(d, p.half_kv.k, p.half_kv.v);
      forward_blocks(p, block, sparse, sparse && heads_inside(p, 2, partial_bits), partial_bits,
                     [&](ForwardScratch<T>&) {
                       return Bf16Products<ScoreMod, MaskMod>(p, pairs, path, block);
                     });
      return;
    }
  }
  KeyTiles<T> keys(d, p.k, p.v, p.half_kv);
  forward_blocks(p, block, sparse, sparse && heads_inside(p, sizeof(T), partial_bits), partial_bits,
                 [&](ForwardScratch<T>& scratch) {
                   return F32Products<T, ScoreMod, MaskMod>(p, keys, scratch);
                 });
}

// y [n] <- exp(x [n]) by one of tile-inl.h's f32 exps (Exp::operator()(d, v)), any n.
template <class Exp>
void exp_n(Exp exp, const float* x, float* y, std::int64_t n) {
  const hn::ScalableTag<float> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(exp(d, hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) {
    const hn::CappedTag<float, 1> d1;
    hn::StoreU(exp(d1, hn::LoadU(d1, x + i)), d1, y + i);
  }
}

void ExpSoftmaxF32(const float* x, float* y, std::int64_t n) {
  exp_n([](auto d, auto v) { return exp_softmax(d, v); }, x, y, n);
}

void ExpForBf16F32(const float* x, float* y, std::int64_t n) {
  exp_n([](auto d, auto v) { return exp_for_bf16(d, v); }, x, y, n);
}

void SoftCapF32(float cap, float* s, float* grad, std::int64_t n) { soft_cap_n(cap, s, grad, n); }
void SoftCapF64(double cap, double* s, double* grad, std::int64_t n) {
  soft_cap_n(cap, s, grad, n);
}

void ForwardF32(const FwdParams<float>& p) { forward_tiled(p); }
void ForwardF64(const FwdParams<double>& p) { forward_tiled(p); }
void FlexForwardF32(const FlexFwdParams<float>& p) { forward_tiled(p); }
void FlexForwardF64(const FlexFwdParams<double>& p) { forward_tiled(p); }

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(ExpSoftmaxF32);
HWY_EXPORT(ExpForBf16F32);
HWY_EXPORT(SoftCapF32);
HWY_EXPORT(SoftCapF64);
HWY_EXPORT(ForwardF32);
HWY_EXPORT(ForwardF64);
HWY_EXPORT(FlexForwardF32);
HWY_EXPORT(FlexForwardF64);

void exp_softmax(const float* x, float* y, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(ExpSoftmaxF32)(x, y, n);
}

void exp_for_bf16(const float* x, float* y, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(ExpForBf16F32)(x, y, n);
}

void soft_cap(float cap, float* s, float* grad, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(SoftCapF32)(cap, s, grad, n);
}
void soft_cap(double cap, double* s, double* grad, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(SoftCapF64)(cap, s, grad, n);
}

template <>
void forward(const FwdParams<float>& params) {
  if (TileTraits::decode_shape(params.dims.Tq, params.dims.Tk)) return decode(params);
  HWY_DYNAMIC_DISPATCH(ForwardF32)(params);
}

template <>
void forward(const FwdParams<double>& params) {
  if (TileTraits::decode_shape(params.dims.Tq, params.dims.Tk)) return decode(params);
  HWY_DYNAMIC_DISPATCH(ForwardF64)(params);
}

template <>
void forward(const FlexFwdParams<float>& params) {
  if (TileTraits::decode_shape(params.dims.Tq, params.dims.Tk)) return decode(params);
  HWY_DYNAMIC_DISPATCH(FlexForwardF32)(params);
}

template <>
void forward(const FlexFwdParams<double>& params) {
  if (TileTraits::decode_shape(params.dims.Tq, params.dims.Tk)) return decode(params);
  HWY_DYNAMIC_DISPATCH(FlexForwardF64)(params);
}

}  // namespace qkv::kernels::cpu
#endif
