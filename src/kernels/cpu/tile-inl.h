// Per-tile pieces shared by the fused forward and backward: the score tile with its mods and
// mask, the dropout factors, and the row operations of the softmax. Per-target include guard.
#if defined(QKV_KERNELS_CPU_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_CPU_TILE_INL_H_
#undef QKV_KERNELS_CPU_TILE_INL_H_
#else
#define QKV_KERNELS_CPU_TILE_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/cpu/block_mask.hpp"
#include "kernels/cpu/tile_traits.hpp"
#include "kernels/dual.hpp"
#include "kernels/problem.hpp"
#include "qkv/philox.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr std::int64_t kBk = TileTraits::kBlockK;

// S [rows, kBk] holds q_i . k_j for keys j0 + c. Turns it into s' = score_mod(scale * S) where
// the mask keeps (i0 + r, j0 + c) and c < cols, -inf elsewhere. With grad, also writes
// ds'/d(scale * S) (only needed, and only called, when soft-capping is on).
// Returns the factor the row operations must still apply: without score mods and with a
// positive scale, S is left unscaled (the max and the exp apply the scale, saving a pass over
// the tile, and max(scale * s) = scale * max(s) exactly), and the scale is returned; else 1.
template <class T>
T score_tile(const Problem<T>& p, std::int64_t b, std::int64_t h, std::int64_t i0,
             std::int64_t rows, std::int64_t j0, std::int64_t cols, TileKind kind, T* S, T* grad) {
  const hn::ScalableTag<T> d;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(d));
  const BuiltinScore<T>& mod = p.score_mod;
  const bool has_mod = mod.softcap > 0 || mod.bias || mod.alibi_slopes != nullptr;
  const bool deferred = !has_mod && p.scale > 0;
  if (!deferred) {
    const auto scale = hn::Set(d, p.scale);
    for (std::int64_t n = 0; n < rows * kBk; n += L) {
      hn::Store(hn::Mul(hn::Load(d, S + n), scale), d, S + n);
    }
  }
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    T* s = S + r * kBk;
    const std::int64_t i = i0 + r;
    if (has_mod) {
      for (std::int64_t c = 0; c < cols; ++c) {
        if (grad != nullptr) {
          const Dual<T> out = mod(Dual<T>{s[c], T(1)}, b, h, i, j0 + c);
          s[c] = out.v;
          grad[r * kBk + c] = out.d;
        } else {
          s[c] = mod(s[c], b, h, i, j0 + c);
        }
      }
    }
    std::int64_t keep_hi = cols;
    if (kind == TileKind::partial) {
      // Lengths, causal and window keep one interval of keys per row (key_range of the row
      // alone); only a keep-mask tensor needs the mask element by element.
      const Range keys = key_range(p.mask_mod, b, i, i + 1);
      const std::int64_t keep_lo = std::clamp<std::int64_t>(keys.lo - j0, 0, cols);
      keep_hi = std::clamp<std::int64_t>(keys.hi - j0, keep_lo, cols);
      std::fill(s, s + keep_lo, kNegInf);
      if (p.mask_mod.keep) {
        for (std::int64_t c = keep_lo; c < keep_hi; ++c) {
          if (p.mask_mod.keep(b, h, i, j0 + c) == 0) s[c] = kNegInf;
        }
      }
    }
    std::fill(s + keep_hi, s + kBk, kNegInf);
  }
  return deferred ? p.scale : T(1);
}

// Z [rows, kBk]: the dropout factor of (i0 + r, j0 + c), 0 or 1 / (1 - p). j0 is a multiple of
// 4, so each Philox call serves four consecutive keys.
template <class T>
void dropout_tile(const Problem<T>& p, std::int64_t b, std::int64_t h, std::int64_t i0,
                  std::int64_t rows, std::int64_t j0, std::int64_t cols, T* Z) {
  const DropoutParams& dropout = p.dropout;
  const T kept = static_cast<T>(1.0 / (1.0 - dropout.p));
  const PhiloxKey key = {static_cast<std::uint32_t>(dropout.seed),
                         static_cast<std::uint32_t>(dropout.seed >> 32) ^
                             static_cast<std::uint32_t>(dropout.offset >> 32)};
  const auto bh = static_cast<std::uint32_t>(b * p.dims.Hq + h);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto i = static_cast<std::uint32_t>(i0 + r);
    for (std::int64_t c = 0; c < cols; c += 4) {
      const auto j = static_cast<std::uint32_t>(j0 + c);
      const PhiloxCounter bits =
          philox4x32_10({j >> 2, i, bh, static_cast<std::uint32_t>(dropout.offset)}, key);
      for (std::int64_t lane = 0; lane < 4 && c + lane < cols; ++lane) {
        const bool keep = static_cast<double>(uniform_from_bits(bits[lane])) >= dropout.p;
        Z[r * kBk + c + lane] = keep ? kept : T(0);
      }
    }
  }
}

template <class T>
T row_max(const T* s) {
  const hn::ScalableTag<T> d;
  auto m = hn::Load(d, s);
  for (std::int64_t c = hn::Lanes(d); c < kBk; c += hn::Lanes(d))
    m = hn::Max(m, hn::Load(d, s + c));
  return hn::GetLane(hn::MaxOfLanes(d, m));
}

// exp(x) for the arguments of a softmax (x <= 0), f32: x = n ln2 + r with |r| <= ln2 / 2 by a
// two-constant Cody-Waite reduction, exp(r) by Cephes' degree-7 minimax polynomial (relative
// error 1.7e-7, about 1.5 ulp), times 2^n built in the exponent bits. The argument is clamped at
// -88, where n = -127 makes 2^n's bits all zero: below about -87.7 (and for the -inf of masked
// scores) the result is exactly 0, and what is lost, under 1.2e-38, is nothing next to the row
// max's exp(0) = 1. (Highway's Exp, used for f64, is exactly 0 below -1000.)
//
// Written for a short dependency chain, because that, not the instruction count, bounds it: a
// row's eight exps are independent, but each is ~16 operations deep, and the scheduler cannot
// hold enough of them to keep the pipes busy. So n = round(x log2 e) comes from one FMA that
// adds 1.5 * 2^23 + 127 (in that binade a float's ulp is 1, so the addition rounds, and the low
// mantissa bits are n + 127: shifted left 23, they are 2^n), instead of Round, a conversion and
// Highway's overflow fix-up for it; and the polynomial is evaluated in Estrin's order (depth 4
// instead of 6). A 64 x 64 tile, one thread of the Zen 3 VM: 6.7 us -> 5.3 us, where its
// Q K^T product at D = 64 takes 14.3 us; same accuracy (worst 1.23 ulp over [-87, 0]).
template <class D>
HWY_INLINE hn::Vec<D> exp_softmax(D d, hn::Vec<D> x) {
  if constexpr (sizeof(hn::TFromD<D>) == 8) {
    return hn::Exp(d, x);  // f64 is for accuracy, not speed
  } else {
    const hn::RebindToSigned<D> di;
    const auto shifter = hn::Set(d, 12583039.0f);  // 1.5 * 2^23 + 127
    x = hn::Max(x, hn::Set(d, -88.0f));
    const auto t = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), shifter);
    const auto n = hn::Sub(t, shifter);
    auto r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
    r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
    // exp(r) = 1 + r + r^2 (c5 + c4 r + c3 r^2 + c2 r^3 + c1 r^4 + c0 r^5)
    const auto r2 = hn::Mul(r, r);
    const auto c54 = hn::MulAdd(hn::Set(d, 1.6666665459e-1f), r, hn::Set(d, 5.0000001201e-1f));
    const auto c32 = hn::MulAdd(hn::Set(d, 8.3334519073e-3f), r, hn::Set(d, 4.1665795894e-2f));
    const auto c10 = hn::MulAdd(hn::Set(d, 1.9875691500e-4f), r, hn::Set(d, 1.3981999507e-3f));
    const auto poly = hn::MulAdd(hn::MulAdd(c10, r2, c32), r2, c54);
    const auto y = hn::MulAdd(poly, r2, hn::Add(r, hn::Set(d, 1.0f)));
    return hn::Mul(y, hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, t))));
  }
}

// s[c] <- exp(scale * s[c] - shift), exactly 0 where s[c] is -inf (exp_softmax's clamp; scale
// > 0 and shift finite); returns the row sum.
template <class T>
T row_exp(T* s, T scale, T shift) {
  const hn::ScalableTag<T> d;
  const auto vscale = hn::Set(d, scale);
  const auto vshift = hn::Set(d, shift);
  auto sum = hn::Zero(d);
  for (std::int64_t c = 0; c < kBk; c += hn::Lanes(d)) {
    const auto x = hn::Load(d, s + c);
    const auto e = exp_softmax(d, hn::MulSub(x, vscale, vshift));
    hn::Store(e, d, s + c);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// x[r] <- exp(x[r]) for r < n, arguments <= 0 as exp_softmax takes them (-inf gives 0); n is a
// multiple of the vector length.
template <class T>
void exp_rows(T* x, std::int64_t n) {
  const hn::ScalableTag<T> d;
  for (std::int64_t r = 0; r < n; r += hn::Lanes(d)) {
    hn::Store(exp_softmax(d, hn::Load(d, x + r)), d, x + r);
  }
}

// a[n] *= b[n] for a row of kBk elements.
template <class T>
void row_mul(T* a, const T* b) {
  const hn::ScalableTag<T> d;
  for (std::int64_t c = 0; c < kBk; c += hn::Lanes(d)) {
    hn::Store(hn::Mul(hn::Load(d, a + c), hn::Load(d, b + c)), d, a + c);
  }
}

// x[n] *= factor for n < count (any count).
template <class T>
void scale_row(T* x, std::int64_t count, T factor) {
  for (std::int64_t n = 0; n < count; ++n) x[n] *= factor;
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_CPU_TILE_INL_H_
