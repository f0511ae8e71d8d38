#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/params.hpp"
#include "qkv/attention.hpp"
#include "qkv/dual.hpp"
#include "qkv/masks.hpp"

namespace qkv::kernels {

// Per-batch valid lengths: tq = query_lengths[b] (else Tq), tk = key_lengths[b] (else Tk).
struct Lengths {
  std::int64_t Tq = 0, Tk = 0;
  const std::int64_t* query = nullptr;  // [B] or null
  const std::int64_t* key = nullptr;    // [B] or null
  std::int64_t tq(std::int64_t b) const noexcept { return query ? query[b] : Tq; }
  std::int64_t tk(std::int64_t b) const noexcept { return key ? key[b] : Tk; }
};

// mask_mod(b, h, i, j) -> keep: every built-in mask option at once (step 3 of the semantics),
// as the rules of qkv/masks.hpp: lengths, causal and window keep one interval of keys per row
// (keys), a keep-mask tensor drops elements inside it.
struct BuiltinMask {
  Lengths lengths;
  Causal causal = Causal::none;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  Broadcast4<std::uint8_t> keep;

  // The keys row i of batch b keeps but for the keep-mask tensor (not `keys`: with the tensor, the
  // row's keys are not one interval).
  KeyRange interval(std::int64_t b, std::int64_t, std::int64_t i) const noexcept {
    const std::int64_t tq = lengths.tq(b);
    const std::int64_t tk = lengths.tk(b);
    if (i >= tq) return {0, 0};
    KeyRange r{0, tk};
    if (causal == Causal::top_left) r = intersect(r, masks::causal_keys(i, 0));
    if (causal == Causal::bottom_right) r = intersect(r, masks::causal_keys(i, tk - tq));
    return intersect(r, masks::window_keys(i, tk - tq, window_left, window_right));
  }
  bool operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const noexcept {
    return interval(b, h, i).contains(j) && (!keep || keep(b, h, i, j) != 0);
  }
  // x[c] <- value for c < cols where row i drops key j0 + c.
  template <class T>
  void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                T value, T* x) const noexcept {
    const KeyRange r = interval(b, h, i);
    const std::int64_t lo = std::clamp<std::int64_t>(r.lo - j0, 0, cols);
    const std::int64_t hi = std::clamp<std::int64_t>(r.hi - j0, lo, cols);
    std::fill(x, x + lo, value);
    if (keep) {
      for (std::int64_t c = lo; c < hi; ++c) {
        if (keep(b, h, i, j0 + c) == 0) x[c] = value;
      }
    }
    std::fill(x + hi, x + cols, value);
  }
  // The tiles of rows [i0, i1): the intervals' kinds, then the keep-mask tensor's elements in the
  // tiles the intervals leave (one row of it where it is the same for every row).
  void classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only, TileKind* kinds) const {
    struct Intervals {
      const BuiltinMask* m;
      KeyRange keys(std::int64_t b, std::int64_t h, std::int64_t i) const {
        return m->interval(b, h, i);
      }
    };
    masks::classify_row(Intervals{this}, b, h, i0, i1, Tk, bk, only, kinds);
    if (!keep) return;
    // In a tile the intervals fill, every row reads all its keys: where the tensor is the same
    // for every row, one row tells whether it drops any.
    const std::int64_t row_end = keep.stride[2] == 0 ? std::min(i1, i0 + 1) : i1;
    for (std::int64_t kb = 0; kb * bk < Tk; ++kb) {
      if (kinds[kb] == TileKind::empty) continue;
      const std::int64_t j0 = kb * bk, j1 = std::min(j0 + bk, Tk);
      if (kinds[kb] == TileKind::full) {
        bool dropped = false;
        for (std::int64_t i = i0; i < row_end && !dropped; ++i) {
          for (std::int64_t j = j0; j < j1 && !dropped; ++j) dropped = keep(b, h, i, j) == 0;
        }
        if (!dropped) continue;
      }
      bool kept = false;  // does some key the intervals keep survive the tensor?
      for (std::int64_t i = i0; i < i1 && !kept; ++i) {
        const KeyRange r = intersect(interval(b, h, i), {j0, j1});
        for (std::int64_t j = r.lo; j < r.hi && !kept; ++j) kept = keep(b, h, i, j) != 0;
      }
      kinds[kb] = kept ? TileKind::partial : TileKind::empty;
    }
  }
};

// Rows at or past row_limit(mask, b) are dropped whole.
template <class M>
std::int64_t row_limit(const M& mask, std::int64_t b) noexcept {
  if constexpr (requires { mask.lengths.tq(b); }) {
    return mask.lengths.tq(b);
  } else {
    return std::numeric_limits<std::int64_t>::max();
  }
}

// score_mod(s, b, h, i, j) -> s': soft-capping, additive bias and ALiBi (steps 1-2). Generic in
// S so that it evaluates on Dual<T> for the backward's ds'/ds.
template <class T>
struct BuiltinScore {
  Lengths lengths;
  T softcap = 0;
  Broadcast4<T> bias;
  const double* alibi_slopes = nullptr;  // [Hq] or null

  template <class S>
  S operator()(S s, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const noexcept {
    if (softcap > 0) s = soft_cap(s);
    return shift(s, b, h, i, j);
  }
  // ds'/ds is 1 but for the cap; only with the cap are rows renormalized (see probability_row).
  bool has_slope() const noexcept { return softcap > 0; }
  bool renormalizes() const noexcept { return softcap > 0; }

  // c tanh(s / c), computed in double and, for T = float, rounded once to T. In f32, c * tanhf(s /
  // c) rounds three times and errs by up to 3.3 ulps of s' (1.5-2 where |s| > c, s' near +-c),
  // against half an ulp here, and that error goes straight into exp(s' - lse); and ds'/ds = 1 -
  // tanh^2 in f32 is 0 wherever tanh rounds to 1 (|s| > 9c). (For T = double it rounds as the
  // three operations do, which f64 can afford.) The fused kernels compute the same in f64 vectors
  // (soft_cap_row in tile-inl.h).
  T soft_cap(T s) const noexcept {
    const double c = softcap;
    return static_cast<T>(c * std::tanh(static_cast<double>(s) / c));
  }
  // With its derivative 1 - tanh^2 as (1 - t)(1 + t), which does not cancel, and not as the
  // chain c (1 - t^2) / c of dual numbers: for a subnormal c, 1 / c overflows and 0 x inf made
  // the gradient of a saturated score NaN.
  Dual<T> soft_cap(Dual<T> s) const noexcept {
    const double c = softcap;
    const double t = std::tanh(static_cast<double>(s.v) / c);
    return {static_cast<T>(c * t), static_cast<T>(static_cast<double>(s.d) * ((1 - t) * (1 + t)))};
  }

  // Step 2: s + bias[b, h, i, j], minus ALiBi's slope_h * |i + tk - tq - j|.
  template <class S>
  S shift(S s, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const noexcept {
    if (bias) s = s + bias(b, h, i, j);
    if (alibi_slopes != nullptr) {
      const std::int64_t distance = i + lengths.tk(b) - lengths.tq(b) - j;
      s = s - static_cast<T>(alibi_slopes[h] *
                             static_cast<double>(distance < 0 ? -distance : distance));
    }
    return s;
  }
};

// Whether a score mod's ds'/ds may differ from 1, and whether the backward divides rows of P by
// their sums (BuiltinScore says; any other mod: a slope, no renormalization).
template <class M>
bool has_slope(const M& mod) noexcept {
  if constexpr (requires { mod.has_slope(); }) {
    return mod.has_slope();
  } else {
    return true;
  }
}
template <class M>
bool renormalizes(const M& mod) noexcept {
  if constexpr (requires { mod.renormalizes(); }) {
    return mod.renormalizes();
  } else {
    return false;
  }
}

}  // namespace qkv::kernels
