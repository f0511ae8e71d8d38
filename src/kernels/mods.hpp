#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/dual.hpp"
#include "kernels/params.hpp"
#include "qkv/attention.hpp"

namespace qkv::kernels {

// Per-batch valid lengths: tq = query_lengths[b] (else Tq), tk = key_lengths[b] (else Tk).
struct Lengths {
  std::int64_t Tq = 0, Tk = 0;
  const std::int64_t* query = nullptr;  // [B] or null
  const std::int64_t* key = nullptr;    // [B] or null
  std::int64_t tq(std::int64_t b) const noexcept { return query ? query[b] : Tq; }
  std::int64_t tk(std::int64_t b) const noexcept { return key ? key[b] : Tk; }
};

// mask_mod(b, h, i, j) -> keep: every built-in mask option at once (step 3 of the semantics).
struct BuiltinMask {
  Lengths lengths;
  Causal causal = Causal::none;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  Broadcast4<std::uint8_t> keep;

  bool operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const noexcept {
    const std::int64_t tq = lengths.tq(b);
    const std::int64_t tk = lengths.tk(b);
    if (i >= tq || j >= tk) return false;
    const std::int64_t diagonal = i + tk - tq;  // the bottom-right aligned diagonal of row i
    if (causal == Causal::top_left && j > i) return false;
    if (causal == Causal::bottom_right && j > diagonal) return false;
    if (window_left >= 0 && j < diagonal - window_left) return false;
    if (window_right >= 0 && j > diagonal + window_right) return false;
    if (keep && keep(b, h, i, j) == 0) return false;
    return true;
  }
};

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

}  // namespace qkv::kernels
