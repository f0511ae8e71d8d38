// Per-tile pieces shared by the fused forward and backward: the score tile with its mods and
// mask, the dropout factors, and the row operations of the softmax. Per-target include guard.
#if defined(QKV_KERNELSCPU_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELSCPU_TILE_INL_H_
#undef QKV_KERNELSCPU_TILE_INL_H_
#else
#define QKV_KERNELSCPU_TILE_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/cpu/exp_round_bf16.hpp"
#include "kernels/cpu/gemm-inl.h"
#include "kernels/cpu/load_as-inl.h"
#include "kernels/cpu/score_dot-inl.h"
#include "kernels/cpu/tile_traits.hpp"
#include "kernels/flash_params.hpp"
#include "kernels/flex_mods.hpp"
#include "qkv/philox.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr std::int64_t kBk = TileTraits::kBlockK;

// Sets the entries of x [kBk], row i of a tile of keys [j0, j0 + cols) of head h of batch b, that
// the mask drops to `value`, and the padding past cols too. The mod's drop_row fills whole key
// intervals where it has them (the built-in options) and runs the mod inlined over the row
// otherwise (flex_attention's mods, through one call per row).
template <class M, class T>
void mask_row(const M& mask, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
              std::int64_t cols, T value, T* x) {
  mask.drop_row(b, h, i, j0, cols, value, x);
  std::fill(x + cols, x + kBk, value);
}

// The built-in options without a keep-mask tensor keep one interval [lo, hi) of the row's keys:
// x [kBk] <- value outside it, by whole vectors compared with the interval, no branch per row.
// The two fills of variable length took 3% of a causal forward (T 2048, D 64, one thread of the
// AMD EPYC Zen 5 VM, 2026-11-28, perf: score_tile over the diagonal tiles).
template <class T>
void mask_row(const BuiltinMask& mask, std::int64_t b, std::int64_t h, std::int64_t i,
              std::int64_t j0, std::int64_t cols, T value, T* x) {
  if (mask.keep) {
    mask.drop_row(b, h, i, j0, cols, value, x);
    std::fill(x + cols, x + kBk, value);
    return;
  }
  const KeyRange r = mask.interval(b, h, i);
  const std::int64_t lo = std::clamp<std::int64_t>(r.lo - j0, 0, cols);
  const std::int64_t hi = std::clamp<std::int64_t>(r.hi - j0, lo, cols);
  const hn::ScalableTag<T> d;
  const hn::RebindToSigned<decltype(d)> di;
  using TI = hn::TFromD<decltype(di)>;
  const auto fill = hn::Set(d, value);
  // lo <= c < hi as c > lo - 1 and hi > c (Highway has no signed >= on x86).
  const auto before = hn::Set(di, static_cast<TI>(lo - 1)), end = hn::Set(di, static_cast<TI>(hi));
  for (std::int64_t c = 0; c < kBk; c += hn::Lanes(d)) {
    const auto at = hn::Iota(di, static_cast<TI>(c));
    const auto keep = hn::RebindMask(d, hn::And(hn::Gt(at, before), hn::Gt(end, at)));
    hn::StoreU(hn::IfThenElse(keep, hn::LoadU(d, x + c), fill), d, x + c);
  }
}

static_assert(TileTraits::kBlockK == 64, "a row of a tile's kept keys is one 64-bit word");

// x [kBk] <- x where bit c of `kept` is set, value elsewhere (so past the tile's keys too): a
// row's mask from the bits drop_cache-inl.h keeps.
template <class T>
void keep_bits(std::uint64_t kept, T value, T* x) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  const auto fill = hn::Set(d, value);
  for (std::int64_t c = 0; c < kBk; c += L) {
    const std::uint64_t lanes = kept >> c;
    std::uint8_t bytes[8];
    for (int k = 0; k < 8; ++k) bytes[k] = static_cast<std::uint8_t>(lanes >> (8 * k));
    const auto keep = hn::LoadMaskBits(d, bytes);
    hn::StoreU(hn::IfThenElse(keep, hn::LoadU(d, x + c), fill), d, x + c);
  }
}

// s [n_end] <- c tanh(s / c) and, with grad, grad [n_end] <- its derivative 1 - tanh^2(s / c)
// (n_end a multiple of dd's lanes): what
// BuiltinScore::soft_cap computes (and why in double), in f64 lanes, each result rounded once to
// T. With y = expm1(2 |x|), x = s / c: tanh |x| = y / (y + 2), and 1 - tanh^2 = (1 - tanh)(1 +
// tanh) = 2 / (y + 2) * (1 + tanh), which keeps the derivative's digits where tanh is within an
// ulp of 1. Past |x| = 18.7 tanh is 1 in f64 (and expm1 overflows past 354): +-c, derivative 0,
// as for an infinite score. NaN stays NaN. In lanes because the scalar mod per element (libm's
// tanhf) took 3/4 of a soft-capped forward: T = 1024, D = 64, H = 8, one thread of the Zen 3 VM,
// 142-157 ms against 31-34 without the cap; 59-62 ms with this.
template <class DD, class T>
void soft_cap_lanes(DD dd, T cap, T* s, T* grad, std::int64_t n_end) {
  const hn::Rebind<T, decltype(dd)> dt;  // T lanes, as many as dd has
  const auto c = hn::Set(dd, static_cast<double>(cap));
  const auto inv_c = hn::Set(dd, 1.0 / static_cast<double>(cap));
  // s / c: by the reciprocal, unless a subnormal cap makes it overflow (0 x inf would be NaN).
  // Dividing always cost 5-8%: soft-capped forward 31-36 -> 33-37 ms, backward 90-101 -> 98-111
  // (T = 1024, D = 64, H = 8, two threads of the AMD EPYC Zen 3 VM, three interleaved rounds).
  const bool divide = !std::isfinite(1.0 / static_cast<double>(cap));
  const auto over_c = [&](hn::Vec<decltype(dd)> v) {
    return divide ? hn::Div(v, c) : hn::Mul(v, inv_c);
  };
  const auto one = hn::Set(dd, 1.0);
  const auto two = hn::Set(dd, 2.0);
  const auto limit = hn::Set(dd, 18.714973875);
  for (std::int64_t n = 0; n < n_end; n += static_cast<std::int64_t>(hn::Lanes(dd))) {
    const auto x = [&] {
      if constexpr (sizeof(T) == 8) {
        return over_c(hn::LoadU(dd, s + n));
      } else {
        return over_c(hn::PromoteTo(dd, hn::LoadU(dt, s + n)));
      }
    }();
    const auto ax = hn::Abs(x);
    const auto saturated = hn::Gt(ax, limit);
    const auto y = hn::Expm1(dd, hn::Mul(ax, two));
    const auto inv_y2 = hn::Div(one, hn::Add(y, two));
    const auto t = hn::IfThenElse(saturated, one, hn::Mul(y, inv_y2));  // tanh |x|
    const auto capped =
        hn::IfThenElse(hn::IsNaN(x), x, hn::CopySign(hn::Mul(c, t), x));  // c tanh x
    const auto slope =
        hn::IfThenZeroElse(saturated, hn::Mul(hn::Mul(two, inv_y2), hn::Add(one, t)));
    if constexpr (sizeof(T) == 8) {
      hn::StoreU(capped, dd, s + n);
      if (grad != nullptr) hn::StoreU(hn::IfThenElse(hn::IsNaN(x), x, slope), dd, grad + n);
    } else {
      hn::StoreU(hn::DemoteTo(dt, capped), dt, s + n);
      if (grad != nullptr) {
        hn::StoreU(hn::DemoteTo(dt, hn::IfThenElse(hn::IsNaN(x), x, slope)), dt, grad + n);
      }
    }
  }
}

// s [n] (and grad [n]) as soft_cap_lanes does them: whole vectors, then one lane at a time with
// the same arithmetic, so an element comes out the same wherever it lies. flex_attention's
// scores::softcap calls it through kernels::cpu::soft_cap on rows of any length.
template <class T>
void soft_cap_n(T cap, T* s, T* grad, std::int64_t n) {
  const hn::ScalableTag<double> dd;
  const auto L = static_cast<std::int64_t>(hn::Lanes(dd));
  const std::int64_t bulk = n / L * L;
  soft_cap_lanes(dd, cap, s, grad, bulk);
  soft_cap_lanes(hn::CappedTag<double, 1>(), cap, s + bulk, grad == nullptr ? grad : grad + bulk,
                 n - bulk);
}

// A tile row, s [kBk].
template <class T>
void soft_cap_row(T cap, T* s, T* grad) {
  soft_cap_lanes(hn::ScalableTag<double>(), cap, s, grad, kBk);
}

// Row i of the score tile, s [kBk] with keys j0 + c, c < cols: s <- score_mod(s) and, with
// grad, grad <- ds'/ds. The built-in options: the cap in f64 lanes, bias and ALiBi added (ds'/ds
// is the cap's; grad is only asked for with the cap on).
template <class T>
void score_row(const BuiltinScore<T>& mod, std::int64_t b, std::int64_t h, std::int64_t i,
               std::int64_t j0, std::int64_t cols, T* s, T* grad) {
  if (mod.softcap > 0) soft_cap_row(mod.softcap, s, grad);
  if (mod.bias || mod.alibi_slopes != nullptr) {
    for (std::int64_t c = 0; c < cols; ++c) s[c] = mod.shift(s[c], b, h, i, j0 + c);
  }
}
// Any other mod does its own row (flex_attention's: the user's mod inlined, on dual numbers for
// grad).
template <class M, class T>
void score_row(const M& mod, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
               std::int64_t cols, T* s, T* grad) {
  mod.apply_row(b, h, i, j0, cols, s, grad);
}

// Whether a score mod leaves the scores as they are: then a run of full tiles needs no per-tile
// work between the products and the softmax.
template <class T>
bool plain_scores(const BuiltinScore<T>& mod) {
  return !(mod.softcap > 0) && !mod.bias && mod.alibi_slopes == nullptr;
}
template <class T>
bool plain_scores(const FlexScore<T>& mod) {
  return mod.erased == nullptr;
}
template <class M>
bool plain_scores(const M&) {
  return false;
}

// S [rows, kBk] holds the scores scale * q_i . k_j of keys j0 + c (the kernels multiply Q by the
// scale before the product: see scale_rows). Turns them into s' = score_mod(s) where the mask
// keeps (i0 + r, j0 + c) and c < cols, -inf elsewhere: whatever the dropped entries held (a NaN
// from a key past the lengths, say) is overwritten, never used. Row r belongs to the block
// mask's q-block r / kBlockQ of the tile, whose kind is kinds[r / kBlockQ]: full tiles skip the
// mask. With grad, also writes ds'/ds, 0 where the mask drops (only asked for when the mod has a
// slope). With kept [rows], the mask's kept keys of each row not in a full half come from there
// (drop_cache-inl.h) instead of from the mod.
template <class T, class ScoreMod, class MaskMod>
void score_tile(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t h,
                std::int64_t i0, std::int64_t rows, std::int64_t j0, std::int64_t cols,
                const TileKind* kinds, T* S, T* grad, const std::uint64_t* kept = nullptr) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  if (cols == kBk && plain_scores(p.score_mod)) {
    bool all_full = true;
    for (std::int64_t x = 0; x * TileTraits::kBlockQ < rows; ++x) {
      all_full = all_full && kinds[x] == TileKind::full;
    }
    // Nothing to do, and the row loop cost 1.5% of a causal forward (T 2048, D 64, one thread of
    // the AMD EPYC Zen 5 VM, 2026-11-28, perf).
    if (all_full) return;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    T* s = S + r * kBk;
    const std::int64_t i = i0 + r;
    T* g = grad != nullptr ? grad + r * kBk : static_cast<T*>(nullptr);
    score_row(p.score_mod, b, h, i, j0, cols, s, g);
    if (kinds[r / TileTraits::kBlockQ] != TileKind::full) {
      if (kept != nullptr) {
        keep_bits(kept[r], kNegInf, s);
        if (g != nullptr) keep_bits(kept[r], T(0), g);
        continue;
      }
      mask_row(p.mask_mod, b, h, i, j0, cols, kNegInf, s);
      if (g != nullptr) mask_row(p.mask_mod, b, h, i, j0, cols, T(0), g);
    } else {
      std::fill(s + cols, s + kBk, kNegInf);
    }
  }
}

// dst [rows, dim] = scale * src (rows ld apart). The kernels compute the scores as (scale Q) K^T:
// then a row's max score is one of the scores exactly, and exp(s - max) is exp(0) = 1 for it.
// Applying the scale after the product inside the exponent's argument instead (exp(scale * s -
// max), a fused multiply-subtract, as the compiler contracts even a multiply followed by a
// subtract) leaves the product's rounding error, up to half an ulp of the score: for huge scores
// (|s| ~ 1e30 in f32) that is itself huge and sends exp to inf or 0. Rounding scale * q_c first
// costs one rounding per element of q, of the size of the product's own.
template <class T>
void scale_rows(const T* src, std::int64_t ld, std::int64_t rows, std::int64_t dim, T scale,
                T* dst) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < dim; ++c) dst[r * dim + c] = scale * src[r * ld + c];
  }
}

// Z [rows, kBk]: the dropout factor of (i0 + r, j0 + c), 0 or 1 / (1 - p), and 0 past cols, drawn
// at (row0 + i0 + r, col0 + j0 + c). Each Philox call serves four drawn positions [g, g + 4), g a
// multiple of 4 (with col0 0, as in one process, g runs over the tile's own columns).
template <class T, class ScoreMod, class MaskMod>
void dropout_tile(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t h,
                  std::int64_t i0, std::int64_t rows, std::int64_t j0, std::int64_t cols, T* Z) {
  const DropoutParams& dropout = p.dropout;
  const T kept = static_cast<T>(1.0 / (1.0 - dropout.p));
  const auto bh = static_cast<std::uint32_t>(b * p.dims.Hq + h);
  const std::int64_t first = dropout.col0 + j0;  // the drawn position of column 0
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto i = static_cast<std::uint32_t>(dropout.row0 + i0 + r);
    // The groups [g, g + 4) that hold the row's drawn positions, clipped to them.
    for (std::int64_t g = first & ~std::int64_t{3}; g < first + cols; g += 4) {
      const PhiloxCounter bits =
          dropout_block(dropout.seed, dropout.offset, bh, i, static_cast<std::uint32_t>(g >> 2));
      for (std::int64_t j = std::max(g, first); j < std::min(g + 4, first + cols); ++j) {
        const bool keep = static_cast<double>(uniform_from_bits(bits[j - g])) >= dropout.p;
        Z[r * kBk + (j - first)] = keep ? kept : T(0);
      }
    }
    // Past cols, 0: the backward multiplies whole rows of dP by Z and then tests them for NaN.
    std::fill(Z + r * kBk + cols, Z + (r + 1) * kBk, T(0));
  }
}

// The max of s [n], n a multiple of the vector length (a tile row: kBk).
template <class T>
T row_max(const T* s, std::int64_t n = kBk) {
  const hn::ScalableTag<T> d;
  auto m = hn::Load(d, s);
  for (std::int64_t c = hn::Lanes(d); c < n; c += hn::Lanes(d)) m = hn::Max(m, hn::Load(d, s + c));
  return hn::GetLane(hn::MaxOfLanes(d, m));
}

// exp(x) for the arguments of a softmax (x <= 0), f32: x = n ln2 + r with |r| <= ln2 / 2 by a
// two-constant Cody-Waite reduction, exp(r) by Cephes' degree-7 minimax polynomial (relative
// error 1.7e-7, about 1.5 ulp), times 2^n built in the exponent bits. The argument is clamped at
// -88, where n = -127 makes 2^n's bits all zero: below about -87.7 (and for the -inf of masked
// scores) the result is exactly 0, and what is lost, under 1.2e-38, is nothing next to the row
// max's exp(0) = 1. (Highway's Exp, used for f64, is exactly 0 below -1000.)
//
// A NaN argument gives NaN (a NaN score must reach its row: docs/numerics.md). Hence the clamp by
// a compare and a select, not Max, whose NaN result differs between targets (x86's maxps returns
// its second operand, EMU128 the number), and Highway's Exp, which returns 0 for NaN, behind the
// same select.
//
// Written for a short dependency chain, because that, not the instruction count, bounds it: a
// row's eight exps are independent, but each is ~16 operations deep, and the scheduler cannot
// hold enough of them to keep the pipes busy. So n = round(x log2 e) comes from one FMA that
// adds 1.5 * 2^23 + 127 (in that binade a float's ulp is 1, so the addition rounds, and the low
// mantissa bits are n + 127: shifted left 23, they are 2^n), instead of Round, a conversion and
// Highway's overflow fix-up for it; and the polynomial is evaluated in Estrin's order (depth 4
// instead of 6). A 64 x 64 tile, one thread of the Zen 3 VM: 6.7 us -> 5.3 us, where its
// Q K^T product at D = 64 takes 14.3 us; same accuracy (worst 1.23 ulp over [-87, 0]).
// The argument reduction both f32 exps share: x clamped at -88 (a NaN stays), n = round(x log2 e)
// and t, whose bits shifted left 23 are 2^n (see exp_softmax).
template <class D>
struct ExpSplit {
  hn::Vec<D> x, n, t;
};
template <class D>
HWY_INLINE ExpSplit<D> exp_split(D d, hn::Vec<D> x) {
  const auto shifter = hn::Set(d, 12583039.0f);  // 1.5 * 2^23 + 127
  const auto lowest = hn::Set(d, -88.0f);
  x = hn::IfThenElse(hn::Lt(x, lowest), lowest, x);
  const auto t = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), shifter);
  return {x, hn::Sub(t, shifter), t};
}
// y 2^n from exp_split's t.
template <class D>
HWY_INLINE hn::Vec<D> times_two_to_n(D d, hn::Vec<D> y, hn::Vec<D> t) {
  const hn::RebindToSigned<D> di;
  return hn::Mul(y, hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, t))));
}

template <class D>
HWY_INLINE hn::Vec<D> exp_softmax(D d, hn::Vec<D> x) {
  if constexpr (sizeof(hn::TFromD<D>) == 8) {
    return hn::IfThenElse(hn::IsNaN(x), x, hn::Exp(d, x));  // f64 is for accuracy, not speed
  } else {
    const ExpSplit<D> a = exp_split(d, x);
    auto r = hn::NegMulAdd(a.n, hn::Set(d, 0.693359375f), a.x);
    r = hn::NegMulAdd(a.n, hn::Set(d, -2.12194440e-4f), r);
    // exp(r) = 1 + r + r^2 (c5 + c4 r + c3 r^2 + c2 r^3 + c1 r^4 + c0 r^5)
    const auto r2 = hn::Mul(r, r);
    const auto c54 = hn::MulAdd(hn::Set(d, 1.6666665459e-1f), r, hn::Set(d, 5.0000001201e-1f));
    const auto c32 = hn::MulAdd(hn::Set(d, 8.3334519073e-3f), r, hn::Set(d, 4.1665795894e-2f));
    const auto c10 = hn::MulAdd(hn::Set(d, 1.9875691500e-4f), r, hn::Set(d, 1.3981999507e-3f));
    const auto poly = hn::MulAdd(hn::MulAdd(c10, r2, c32), r2, c54);
    const auto y = hn::MulAdd(poly, r2, hn::Add(r, hn::Set(d, 1.0f)));
    return times_two_to_n(d, y, a.t);
  }
}

// exp(x) for a softmax whose P is rounded to bf16 before P V (f32 only; x <= 0): exp_softmax's
// clamp and its 2^n, one-constant reduction (r = x - n fl(ln2), off by at most 127 |ln2 -
// fl(ln2)| = 2.4e-7) and a degree-4 polynomial 1 + r (c1 + r (c2 + r (c3 + r c4))) in Horner's
// order, fitted for relative error (Lawson's iteration over 20001 points of [-ln2/2, ln2/2]):
// 2.9e-6 relative in f32 evaluation, with the reduction at most 3.1e-6 over [-87, 0] (test_exp),
// a thousandth of bf16's half unit (2^-9 to 2^-8), and exactly 1 at x = 0. The row sum reads these
// values unrounded, which moves lse and out by at most 3.1e-6 relative. 14 vector operations for 16
// values where exp_softmax's scale-exp-round pass took 18; written out operation for operation in
// exp_round_bf16_avx512.cpp, whose results must equal these bit for bit (the native and portable
// bf16 forwards are compared bitwise). There, 128 rows of 256 scores, one core of the Intel Xeon
// (AVX512-BF16, AMX), 2026-11-27: 7.86 -> 5.95 us; the bf16 forward at T 4096, D 64, 2 threads:
// 44.8-50.7 -> 40.1-42.5 ms (three alternated runs). Degree 5 would give 1.5e-7 for one more FMA.
template <class D>
HWY_INLINE hn::Vec<D> exp_for_bf16(D d, hn::Vec<D> x) {
  static_assert(sizeof(hn::TFromD<D>) == 4, "bf16 products accumulate in f32");
  const ExpSplit<D> a = exp_split(d, x);
  const auto r = hn::NegMulAdd(a.n, hn::Set(d, 0.693147180559945309f), a.x);
  auto p = hn::MulAdd(hn::Set(d, kExpBf16C4), r, hn::Set(d, kExpBf16C3));
  p = hn::MulAdd(p, r, hn::Set(d, kExpBf16C2));
  p = hn::MulAdd(p, r, hn::Set(d, kExpBf16C1));
  return times_two_to_n(d, hn::MulAdd(p, r, hn::Set(d, 1.0f)), a.t);
}

// s[c] <- exp(s[c] - shift), exactly 0 where s[c] is -inf (exp_softmax's clamp; shift finite),
// NaN where s[c] is NaN, NaN everywhere for a NaN shift (a NaN row's lse); returns the row sum.
// s [n], n a multiple of the vector length (a tile row: kBk).
template <class T>
T row_exp(T* s, T shift, std::int64_t n = kBk) {
  const hn::ScalableTag<T> d;
  const auto vshift = hn::Set(d, shift);
  auto sum = hn::Zero(d);
  for (std::int64_t c = 0; c < n; c += hn::Lanes(d)) {
    const auto e = exp_softmax(d, hn::Sub(hn::Load(d, s + c), vshift));
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

// y[n] += a * x[n] for n < count (any count; x stored as E, load_as-inl.h).
template <class T, class E>
void axpy(T a, const E* HWY_RESTRICT x, T* HWY_RESTRICT y, std::int64_t count) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  const auto va = hn::Set(d, a);
  std::int64_t n = 0;
  for (; n + L <= count; n += L) {
    hn::StoreU(hn::MulAdd(va, load_as(d, x + n), hn::LoadU(d, y + n)), d, y + n);
  }
  for (; n < count; ++n) y[n] = mul_add(a, value_as<T>(x[n]), y[n]);
}

// y[r] [count] += a[r] * x [count] for the rows r in [0, n): axpy's operations row by row, so its
// bits, with each vector of x loaded (and converted from E) once for all the rows (score_dot_rows:
// the rows of a GQA group share each key's V row).
template <class T, class E>
void axpy_rows(const T* a, const E* HWY_RESTRICT x, T* const* y, std::int64_t n,
               std::int64_t count) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t e = 0;
  for (; e + L <= count; e += L) {
    const auto xe = load_as(d, x + e);
    for (std::int64_t r = 0; r < n; ++r) {
      hn::StoreU(hn::MulAdd(hn::Set(d, a[r]), xe, hn::LoadU(d, y[r] + e)), d, y[r] + e);
    }
  }
  for (; e < count; ++e) {
    for (std::int64_t r = 0; r < n; ++r) y[r][e] = mul_add(a[r], value_as<T>(x[e]), y[r][e]);
  }
}

// y[r] [e0, e0 + V L) += a[r][c] * x[c ldx] [e0, e0 + V L) for the keys c in [0, keys) in turn, for
// R rows: the accumulators stay in registers across the keys, and each key's V vectors are loaded
// (and converted from E) once for the R rows.
template <int R, int V, class T, class E>
HWY_INLINE void values_block(const T* const* a, const E* HWY_RESTRICT x, std::int64_t ldx,
                             std::int64_t keys, T* const* y, std::int64_t e0) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  hn::Vec<hn::ScalableTag<T>> acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = hn::LoadU(d, y[r] + e0 + v * L);
  }
  for (std::int64_t c = 0; c < keys; ++c) {
    hn::Vec<hn::ScalableTag<T>> xv[V];
    for (int v = 0; v < V; ++v) xv[v] = load_as(d, x + c * ldx + e0 + v * L);
    for (int r = 0; r < R; ++r) {
      const auto ar = hn::Set(d, a[r][c]);
      for (int v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(ar, xv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) hn::StoreU(acc[r][v], d, y[r] + e0 + v * L);
  }
}

// Vectors of a row that values_rows holds per block: 2 rows of 8 vectors are 16 accumulators of
// AVX-512's 32 registers; of 4, 8 of AVX2's 16.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
inline constexpr int kValueVectors = 8;
#else
inline constexpr int kValueVectors = 4;
#endif

// y[r] [count] += a[r][c] * x[c ldx] [count] for the keys c in [0, keys) in turn, for the rows r
// in [0, n): axpy's operations key after key, so the bits of an axpy per key and row, with the
// rows' accumulators held in registers across the keys in blocks of up to 2 rows by
// kValueVectors vectors, and each V vector loaded once per block of rows. Two rows across a whole
// row of V (D 128 in f32 on AVX-512) rather than 4 rows across half of it: each block then reads
// V's rows whole and in order, which the hardware prefetchers follow, and a second block finds
// them in cache. Read half a row at a time, a row's lines out of order, V from memory took
// longer: a driver alternating the two call by call (qkv::attention_forward, f16 cache [1, 8, Tk,
// 128] heads first, Tq 1, 2 threads, AMD EPYC (family 25, model 17) Zen 4 VM, 2026-11-29, medians
// of 15 calls, two rounds), time of whole rows over halves: Hq 32 at Tk 65536 0.87-0.88, Hq 16
// 0.76-0.77; Tk 4096 (in L3) 1.01-1.03.
template <class T, class E>
void values_rows(const T* const* a, const E* HWY_RESTRICT x, std::int64_t ldx, std::int64_t keys,
                 T* const* y, std::int64_t n, std::int64_t count) {
  const auto L = static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  for (std::int64_t r0 = 0; r0 < n; r0 += 2) {
    const std::int64_t m = std::min<std::int64_t>(2, n - r0);
    const auto block = [&]<int V>(std::int64_t e0) {
      if (m == 2) {
        values_block<2, V>(a + r0, x, ldx, keys, y + r0, e0);
      } else {
        values_block<1, V>(a + r0, x, ldx, keys, y + r0, e0);
      }
    };
    std::int64_t e = 0;
    for (; e + kValueVectors * L <= count; e += kValueVectors * L) {
      block.template operator()<kValueVectors>(e);
    }
    if constexpr (kValueVectors > 4) {
      for (; e + 4 * L <= count; e += 4 * L) block.template operator()<4>(e);
    }
    for (; e + 2 * L <= count; e += 2 * L) block.template operator()<2>(e);
    for (; e + L <= count; e += L) block.template operator()<1>(e);
    for (; e < count; ++e) {
      for (std::int64_t r = r0; r < r0 + m; ++r) {
        T ye = y[r][e];
        for (std::int64_t c = 0; c < keys; ++c)
          ye = mul_add(a[r][c], value_as<T>(x[c * ldx + e]), ye);
        y[r][e] = ye;
      }
    }
  }
}

// Whether x[0, count) holds only finite numbers: x * 0 is 0 for those and NaN for inf and NaN.
template <class T>
bool all_finite(const T* x, std::int64_t count) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  const auto zero = hn::Zero(d);
  auto probe = zero;
  std::int64_t n = 0;
  for (; n + L <= count; n += L) probe = hn::MulAdd(hn::LoadU(d, x + n), zero, probe);
  T tail = 0;
  for (; n < count; ++n) tail += x[n] * T(0);
  return hn::AllFalse(d, hn::IsNaN(probe)) && tail == T(0);
}

// Whether a row of kBk elements holds only finite numbers (all_finite, in whole vectors).
template <class T>
bool row_finite(const T* x) {
  const hn::ScalableTag<T> d;
  const auto zero = hn::Zero(d);
  auto probe = zero;
  for (std::int64_t c = 0; c < kBk; c += hn::Lanes(d))
    probe = hn::MulAdd(hn::Load(d, x + c), zero, probe);
  return hn::AllFalse(d, hn::IsNaN(probe));
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

#endif  // QKV_KERNELSCPU_TILE_INL_H_
