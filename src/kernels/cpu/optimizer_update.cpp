// The optimizers' per-element updates per SIMD target (optimizer_update.hpp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/optimizer_update.cpp"
#include "kernels/cpu/optimizer_update.hpp"

#include <cmath>
#include <cstdint>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Lanes of double, and the same number of lanes of T (float: half a vector; double: a whole one).
template <class T, class D64, class V64>
void AdamWLanes(D64 d64, T* p, const T* g, T* m, T* v, const AdamWConstants& c, std::int64_t i) {
  const hn::Rebind<T, D64> dt;
  const V64 decay = hn::Set(d64, c.decay), b1 = hn::Set(d64, c.beta1), b2 = hn::Set(d64, c.beta2),
            c1 = hn::Set(d64, 1 - c.beta1), c2 = hn::Set(d64, 1 - c.beta2),
            step = hn::Set(d64, c.step_size), bc2 = hn::Set(d64, c.bias_correction2_sqrt),
            eps = hn::Set(d64, c.eps);
  const auto load = [&](const T* from) {
    if constexpr (sizeof(T) == 4) {
      return hn::PromoteTo(d64, hn::LoadU(dt, from + i));
    } else {
      return hn::LoadU(d64, from + i);
    }
  };
  const auto store = [&](V64 x, T* to) {
    if constexpr (sizeof(T) == 4) {
      hn::StoreU(hn::DemoteTo(dt, x), dt, to + i);
    } else {
      hn::StoreU(x, d64, to + i);
    }
  };
  const V64 gr = load(g);
  const V64 x = hn::Mul(load(p), decay);
  const V64 mm = hn::Add(hn::Mul(b1, load(m)), hn::Mul(c1, gr));
  const V64 vv = hn::Add(hn::Mul(b2, load(v)), hn::Mul(hn::Mul(c2, gr), gr));
  store(mm, m);
  store(vv, v);
  store(hn::Sub(x, hn::Div(hn::Mul(step, mm), hn::Add(hn::Div(hn::Sqrt(vv), bc2), eps))), p);
}

template <class T>
void AdamW(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamWConstants& c) {
  const hn::ScalableTag<double> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + L <= n; i += L) AdamWLanes<T, decltype(d), hn::Vec<decltype(d)>>(d, p, g, m, v, c, i);
  const hn::CappedTag<double, 1> d1;
  for (; i < n; ++i) AdamWLanes<T, decltype(d1), hn::Vec<decltype(d1)>>(d1, p, g, m, v, c, i);
}

void AdamWF32(float* p, const float* g, float* m, float* v, std::int64_t n,
              const AdamWConstants& c) {
  AdamW(p, g, m, v, n, c);
}
void AdamWF64(double* p, const double* g, double* m, double* v, std::int64_t n,
              const AdamWConstants& c) {
  AdamW(p, g, m, v, n, c);
}

template <class T>
double SumOfSquares(const T* x, std::int64_t n) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<T, decltype(d)> dt;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  auto load = [&](std::int64_t i) {
    if constexpr (sizeof(T) == 4) {
      return hn::PromoteTo(d, hn::LoadU(dt, x + i));
    } else {
      return hn::LoadU(d, x + i);
    }
  };
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    const auto a = load(i), b = load(i + L);
    s0 = hn::MulAdd(a, a, s0);
    s1 = hn::MulAdd(b, b, s1);
  }
  for (; i + L <= n; i += L) {
    const auto a = load(i);
    s0 = hn::MulAdd(a, a, s0);
  }
  double sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

double SumOfSquaresF32(const float* x, std::int64_t n) { return SumOfSquares(x, n); }
double SumOfSquaresF64(const double* x, std::int64_t n) { return SumOfSquares(x, n); }

template <class T>
void Scale(T* x, std::int64_t n, double factor) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<T, decltype(d)> dt;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  const auto f = hn::Set(d, factor);
  std::int64_t i = 0;
  for (; i + L <= n; i += L) {
    if constexpr (sizeof(T) == 4) {
      hn::StoreU(hn::DemoteTo(dt, hn::Mul(hn::PromoteTo(d, hn::LoadU(dt, x + i)), f)), dt, x + i);
    } else {
      hn::StoreU(hn::Mul(hn::LoadU(d, x + i), f), d, x + i);
    }
  }
  for (; i < n; ++i) x[i] = static_cast<T>(static_cast<double>(x[i]) * factor);
}

void ScaleF32(float* x, std::int64_t n, double factor) { Scale(x, n, factor); }
void ScaleF64(double* x, std::int64_t n, double factor) { Scale(x, n, factor); }

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(AdamWF32);
HWY_EXPORT(AdamWF64);
HWY_EXPORT(SumOfSquaresF32);
HWY_EXPORT(SumOfSquaresF64);
HWY_EXPORT(ScaleF32);
HWY_EXPORT(ScaleF64);

void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n,
                  const AdamWConstants& c) {
  HWY_DYNAMIC_DISPATCH(AdamWF32)(p, g, m, v, n, c);
}
void adamw_update(double* p, const double* g, double* m, double* v, std::int64_t n,
                  const AdamWConstants& c) {
  HWY_DYNAMIC_DISPATCH(AdamWF64)(p, g, m, v, n, c);
}
double sum_of_squares(const float* x, std::int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SumOfSquaresF32)(x, n);
}
double sum_of_squares(const double* x, std::int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SumOfSquaresF64)(x, n);
}
void scale_values(float* x, std::int64_t n, double factor) {
  HWY_DYNAMIC_DISPATCH(ScaleF32)(x, n, factor);
}
void scale_values(double* x, std::int64_t n, double factor) {
  HWY_DYNAMIC_DISPATCH(ScaleF64)(x, n, factor);
}

}  // namespace qkv::kernels::cpu
#endif
