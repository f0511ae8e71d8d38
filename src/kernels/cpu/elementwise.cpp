// Element-by-element math per SIMD target (elementwise.hpp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise.cpp"
#include "kernels/cpu/elementwise.hpp"

#include <cstdint>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

// After foreach_target.h: compiled once per target.
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

void TanhF32(const float* x, std::int64_t n, float* y) {
  const hn::ScalableTag<float> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::Tanh(d, hn::LoadU(d, x + i)), d, y + i);
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) hn::StoreU(hn::Tanh(d1, hn::LoadU(d1, x + i)), d1, y + i);
}

template <class T>
void Relu(const T* x, std::int64_t n, T* y) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  const auto zero = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto v = hn::LoadU(d, x + i);
    hn::StoreU(hn::IfThenElseZero(hn::Gt(v, zero), v), d, y + i);
  }
  for (; i < n; ++i) y[i] = x[i] > 0 ? x[i] : T(0);
}

template <class T>
void ReluGrad(const T* g, const T* y, std::int64_t n, T* dx) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  const auto zero = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto kept = hn::Gt(hn::LoadU(d, y + i), zero);
    hn::StoreU(hn::IfThenElseZero(kept, hn::LoadU(d, g + i)), d, dx + i);
  }
  for (; i < n; ++i) dx[i] = y[i] > 0 ? g[i] : T(0);
}

void ReluF32(const float* x, std::int64_t n, float* y) { Relu(x, n, y); }
void ReluF64(const double* x, std::int64_t n, double* y) { Relu(x, n, y); }
void ReluGradF32(const float* g, const float* y, std::int64_t n, float* dx) {
  ReluGrad(g, y, n, dx);
}
void ReluGradF64(const double* g, const double* y, std::int64_t n, double* dx) {
  ReluGrad(g, y, n, dx);
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(TanhF32);
HWY_EXPORT(ReluF32);
HWY_EXPORT(ReluF64);
HWY_EXPORT(ReluGradF32);
HWY_EXPORT(ReluGradF64);

void tanh_values(const float* x, std::int64_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(TanhF32)(x, n, y);
}

void relu_values(const float* x, std::int64_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(ReluF32)(x, n, y);
}
void relu_values(const double* x, std::int64_t n, double* y) {
  HWY_DYNAMIC_DISPATCH(ReluF64)(x, n, y);
}
void relu_grad(const float* g, const float* y, std::int64_t n, float* dx) {
  HWY_DYNAMIC_DISPATCH(ReluGradF32)(g, y, n, dx);
}
void relu_grad(const double* g, const double* y, std::int64_t n, double* dx) {
  HWY_DYNAMIC_DISPATCH(ReluGradF64)(g, y, n, dx);
}

}  // namespace qkv::kernels::cpu
#endif
