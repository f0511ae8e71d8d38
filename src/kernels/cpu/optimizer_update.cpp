// The optimizers' per-element updates per SIMD target (optimizer_update.hpp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/optimizer_update.cpp"
#include "kernels/cpu/optimizer_update.hpp"

#include <cmath>
#include <cstdint>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

// After foreach_target.h: compiled once per target.
#include "kernels/cpu/as_double-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// AdamW's update of the lanes of d at i (ForLanes), in double.
template <class T, class D>
void AdamWLanes(D d, T* p, const T* g, T* m, T* v, const AdamWConstants& c, std::int64_t i) {
  const auto decay = hn::Set(d, c.decay), b1 = hn::Set(d, c.beta1), b2 = hn::Set(d, c.beta2),
             c1 = hn::Set(d, 1 - c.beta1), c2 = hn::Set(d, 1 - c.beta2),
             step = hn::Set(d, c.step_size), bc2 = hn::Set(d, c.bias_correction2_sqrt),
             eps = hn::Set(d, c.eps);
  const auto gr = LoadDouble(d, g, i);
  const auto x = hn::Mul(LoadDouble(d, p, i), decay);
  const auto mm = hn::Add(hn::Mul(b1, LoadDouble(d, m, i)), hn::Mul(c1, gr));
  const auto vv = hn::Add(hn::Mul(b2, LoadDouble(d, v, i)), hn::Mul(hn::Mul(c2, gr), gr));
  StoreDouble(d, mm, m, i);
  StoreDouble(d, vv, v, i);
  StoreDouble(d, hn::Sub(x, hn::Div(hn::Mul(step, mm), hn::Add(hn::Div(hn::Sqrt(vv), bc2), eps))),
              p, i);
}

template <class T>
void AdamW(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamWConstants& c) {
  ForLanes(n, [&](auto d, std::int64_t i) { AdamWLanes(d, p, g, m, v, c, i); });
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
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    const auto a = LoadDouble(d, x, i), b = LoadDouble(d, x, i + L);
    s0 = hn::MulAdd(a, a, s0);
    s1 = hn::MulAdd(b, b, s1);
  }
  for (; i + L <= n; i += L) {
    const auto a = LoadDouble(d, x, i);
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
  ForLanes(n, [&](auto d, std::int64_t i) {
    StoreDouble(d, hn::Mul(LoadDouble(d, x, i), hn::Set(d, factor)), x, i);
  });
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
