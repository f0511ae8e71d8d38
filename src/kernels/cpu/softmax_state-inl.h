// The online softmax of the fused forward, as one piece: the state of a set of query rows
// (running max m, running sum l, unnormalized output accumulator acc) that absorbs one score tile
// at a time (rescaling what it holds when a row's max moves), merges partial states of the same
// row computed over disjoint key ranges (split-KV decode), and finalizes into out and lse. Used by
// the tiled forward (flash_fwd.cpp) and the decode (flash_decode.cpp). Per-target include guard.
#if defined(QKV_KERNELSCPU_SOFTMAX_STATE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELSCPU_SOFTMAX_STATE_INL_H_
#undef QKV_KERNELSCPU_SOFTMAX_STATE_INL_H_
#else
#define QKV_KERNELSCPU_SOFTMAX_STATE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/cpu/drop_cache-inl.h"
#include "kernels/cpu/exp_round_bf16.hpp"
#include "kernels/cpu/pack-inl.h"
#include "kernels/cpu/round_bf16-inl.h"
#include "kernels/cpu/tile-inl.h"
#include "kernels/cpu/tile_traits.hpp"
#include "kernels/cpu/upcoming.hpp"
#include "kernels/flash_params.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

// rounded [n] <- the bf16 bits of exp(s[c] - shift) by exp_for_bf16 (s [n] keeps its values);
// returns the sum of the f32 values. One pass where row_exp and round_bf16 took two: the bf16
// products' P V reads only the rounded P.
inline float row_exp_bf16(const float* s, float shift, std::uint16_t* rounded, std::int64_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<std::uint16_t, decltype(d)> d16;
  const auto vshift = hn::Set(d, shift);
  auto sum = hn::Zero(d);
  for (std::int64_t c = 0; c < n; c += hn::Lanes(d)) {
    const auto e = exp_for_bf16(d, hn::Sub(hn::Load(d, s + c), vshift));
    hn::StoreU(hn::DemoteTo(d16, bf16_bits(d, e)), d16, rounded + c);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// The online-softmax state of `rows` query rows: m [rows], l [rows], acc [rows, Dv]. A row that
// has kept no key has m = -inf, l = 0 and acc 0; a row that met a NaN score has l = NaN.
template <class T>
struct SoftmaxState {
  static constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T* acc = nullptr;
  T* m = nullptr;
  T* l = nullptr;

  void reset(std::int64_t rows, std::int64_t dim_v) const {
    std::fill(acc, acc + rows * dim_v, T(0));
    std::fill(m, m + rows, kNegInf);
    std::fill(l, l + rows, T(0));
  }
  SoftmaxState rows_from(std::int64_t row, std::int64_t dim_v) const {
    return {acc + row * dim_v, m + row, l + row};
  }

  // Absorbs the scores s [live, width] of one tile (width kBk) or of several side by side (after
  // the mods and the mask; -inf where a key is dropped): s becomes P against the new running max
  // (or, with `rounded` [live, width], for T = float only, P goes there in bf16 and s is left as
  // it was), l takes the row sums, and acc is rescaled where a row's max moved. The caller then
  // adds P V (times dropout's factors) into acc. With `native` (exp_round_bf16.hpp; only with
  // rounded), the rows go through it, and s may hold the scores before a scale > 0: the max of
  // the rounded products scale * s is scale * max(s) rounded, rounding being monotonic.
  // With ld > 0, s's rows lie ld apart (the width columns of each row are absorbed), not width.
  // ahead: a step of its lines asked of the cache at each row (upcoming.hpp), or null.
  void absorb(T* s, std::int64_t live, std::int64_t dim_v, std::uint16_t* rounded = nullptr,
              std::int64_t width = kBk, T scale = T(1), ExpRoundRow native = nullptr,
              std::int64_t ld = 0, Upcoming* ahead = nullptr) const {
    const std::int64_t row_stride = ld > 0 ? ld : width;
    // The new row maxima first, then every row's rescaling factor alpha = exp(m_old - m_new) in
    // one vector pass (a libm call per row took 1.6% of the forward), over the live rows rounded
    // up to whole vectors.
    alignas(64) T m_new[TileTraits::kForwardBlockQ];
    alignas(64) T alpha[TileTraits::kForwardBlockQ];
    const std::int64_t vector_rows =
        round_up(live, static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<T>())));
    for (std::int64_t r = 0; r < vector_rows; ++r) {
      m_new[r] = r < live ? std::max(m[r], scale * row_max(s + r * row_stride, width)) : T(0);
      alpha[r] = r < live && m[r] != kNegInf ? m[r] - m_new[r] : T(0);
    }
    exp_rows(alpha, vector_rows);
    for (std::int64_t r = 0; r < live; ++r) {
      if (ahead != nullptr) ahead->step();
      T* row = s + r * row_stride;
      if (m_new[r] == kNegInf) {
        // Nothing kept in this row yet, or only -inf and NaN scores (whether the max returns
        // a NaN depends on the target). A NaN must reach the row (docs/numerics.md): it poisons
        // the row sum. -inf scores alone leave the row as if masked.
        if (std::any_of(row, row + width, [](T x) { return x != kNegInf; })) {
          l[r] = std::numeric_limits<T>::quiet_NaN();
        }
        std::fill(row, row + width, T(0));
        if (rounded != nullptr) std::fill(rounded + r * width, rounded + (r + 1) * width, 0);
        continue;
      }
      // Rescale what was accumulated against the old max (a row that kept nothing before has
      // nothing to rescale).
      const T factor = m[r] == kNegInf ? T(0) : alpha[r];
      T row_sum;
      if constexpr (std::is_same_v<T, float>) {
        if (native != nullptr) {
          row_sum = native(row, scale, m_new[r], rounded + r * width, width);
        } else if (rounded != nullptr) {
          row_sum = row_exp_bf16(row, m_new[r], rounded + r * width, width);
        } else {
          row_sum = row_exp(row, m_new[r], width);
        }
      } else {
        row_sum = row_exp(row, m_new[r], width);
      }
      l[r] = l[r] * factor + row_sum;
      m[r] = m_new[r];
      if (factor != T(1)) scale_row(acc + r * dim_v, dim_v, factor);
    }
  }

  // Row r's out [Dv] <- acc / l and its lse <- m + log(l); a row that kept no key (or `dropped`:
  // past its batch's query length) gets out 0 and lse -inf. out may be acc's own row.
  void finalize(std::int64_t r, std::int64_t dim_v, bool dropped, T* out, T& lse) const {
    const bool empty = dropped || l[r] == T(0);
    const T inv = empty ? T(0) : T(1) / l[r];
    for (std::int64_t c = 0; c < dim_v; ++c) out[c] = empty ? T(0) : acc[r * dim_v + c] * inv;
    lse = empty ? kNegInf : m[r] + std::log(l[r]);
  }

  // Row r <- the merge of `parts` partial states of one row, each over its own keys: m [parts],
  // l [parts], acc [parts, Dv]. Exact: the partials are rescaled to their common max, as the
  // online softmax would have rescaled them had it seen their keys in one pass.
  void merge(std::int64_t r, std::int64_t dim_v, std::int64_t parts, const T* part_m,
             const T* part_l, const T* part_acc) const {
    T m_all = kNegInf;
    for (std::int64_t c = 0; c < parts; ++c) m_all = std::max(m_all, part_m[c]);
    // A part whose kept scores were only -inf and NaN holds l = NaN with m = -inf: shifting by 0
    // then, its weight exp(-inf) = 0 still carries the NaN (NaN * 0) into l.
    const T shift = m_all == kNegInf ? T(0) : m_all;
    T l_all = 0;
    T* a = acc + r * dim_v;
    std::fill(a, a + dim_v, T(0));
    for (std::int64_t c = 0; c < parts; ++c) {
      if (part_l[c] == T(0)) continue;  // kept nothing
      const T weight = std::exp(part_m[c] - shift);
      l_all += part_l[c] * weight;
      for (std::int64_t x = 0; x < dim_v; ++x) a[x] += part_acc[c * dim_v + x] * weight;
    }
    m[r] = m_all;
    l[r] = l_all;
  }
};

// Per-thread scratch of the forward: score tiles and dropout factors for `rows` rows of kBk keys,
// the rows of scale * Q [rows, D], softmax state for the same rows, and the mask's kept keys.
template <class T>
struct ForwardScratch {
  hwy::AlignedFreeUniquePtr<T[]> s, z, q, acc, m, l;
  DropCache drops;
  ForwardScratch(std::int64_t rows, std::int64_t dim, std::int64_t dim_v)
      : s(hwy::AllocateAligned<T>(rows * kBk)),
        z(hwy::AllocateAligned<T>(rows * kBk)),
        q(hwy::AllocateAligned<T>(std::max<std::int64_t>(rows * dim, 1))),
        acc(hwy::AllocateAligned<T>(std::max<std::int64_t>(rows * dim_v, 1))),
        m(hwy::AllocateAligned<T>(rows)),
        l(hwy::AllocateAligned<T>(rows)) {
    // Defined from the start: a narrowed product (flash_fwd.cpp) leaves columns of s that the
    // mask then overwrites without reading.
    std::fill(s.get(), s.get() + rows * kBk, T(0));
  }
  SoftmaxState<T> state() { return {acc.get(), m.get(), l.get()}; }
};

// One tile of the forward for rows [i0, i0 + live) of head h of batch b, whose scores against
// keys [j0, j0 + cols) are in s [live, kBk] (scale * q . k, before the mods): the mods and the
// mask (kinds: the tile kind of each 64-row half), the state's absorb, and dropout's factors z
// [live, kBk] on what reaches V (not on the normalizer: lse is not affected). The caller then adds
// P V into the state's acc, from s, or (T = float, `rounded` given) from rounded [live, kBk], P
// times Z in bf16 (rounded by `native` where given and there is no dropout). kept: as score_tile.
// ahead: as absorb.
template <class T, class ScoreMod, class MaskMod>
void softmax_tile(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t h,
                  std::int64_t i0, std::int64_t live, std::int64_t j0, std::int64_t cols,
                  const TileKind* kinds, T* s, T* z, const SoftmaxState<T>& state,
                  std::uint16_t* rounded = nullptr, ExpRoundRow native = nullptr,
                  const std::uint64_t* kept = nullptr, Upcoming* ahead = nullptr) {
  score_tile(p, b, h, i0, live, j0, cols, kinds, s, static_cast<T*>(nullptr), kept);
  if (!p.dropout.enabled()) {
    return state.absorb(s, live, p.dims.Dv, rounded, kBk, T(1), rounded ? native : nullptr, 0,
                        ahead);
  }
  state.absorb(s, live, p.dims.Dv, nullptr, kBk, T(1), nullptr, 0, ahead);
  dropout_tile(p, b, h, i0, live, j0, cols, z);
  for (std::int64_t r = 0; r < live; ++r) row_mul(s + r * kBk, z + r * kBk);
  if constexpr (std::is_same_v<T, float>) {
    if (rounded != nullptr) round_bf16(s, rounded, live * kBk);
  }
}

// Rows at or past batch b's query length (row_limit) are dropped whole.
template <class T, class ScoreMod, class MaskMod>
std::int64_t live_rows(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t i0,
                       std::int64_t rows) {
  return std::clamp<std::int64_t>(row_limit(p.mask_mod, b) - i0, 0, rows);
}

// p.out and p.lse of rows [i0, i0 + rows) of head h of batch b <- state's rows [0, rows) finalized;
// rows past `live` are dropped.
template <class T, class ScoreMod, class MaskMod>
void write_rows(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t h,
                std::int64_t i0, std::int64_t rows, std::int64_t live,
                const SoftmaxState<T>& state) {
  for (std::int64_t r = 0; r < rows; ++r) {
    state.finalize(r, p.dims.Dv, r >= live, p.out.at(b, i0 + r, h), p.lse(b, h, i0 + r));
  }
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELSCPU_SOFTMAX_STATE_INL_H_
