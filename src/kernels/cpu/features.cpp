// Linear attention's feature map, per SIMD target (features.hpp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/features.cpp"
#include "kernels/cpu/features.hpp"

#include <algorithm>
#include <cstdint>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

// exp of min(x, 0): exp_softmax takes arguments <= 0; NaN stays NaN.
template <class D>
HWY_INLINE hn::Vec<D> exp_nonpositive(D d, hn::Vec<D> x) {
  return exp_softmax(d, hn::IfThenElse(hn::Gt(x, hn::Zero(d)), hn::Zero(d), x));
}

// phi(v), and g * phi'(v), on one vector.
template <class D>
HWY_INLINE hn::Vec<D> feature(D d, hn::Vec<D> v) {
  return hn::IfThenElse(hn::Gt(v, hn::Zero(d)), hn::Add(v, hn::Set(d, hn::TFromD<D>(1))),
                        exp_nonpositive(d, v));
}
template <class D>
HWY_INLINE hn::Vec<D> feature_grad(D d, hn::Vec<D> v, hn::Vec<D> g) {
  return hn::Mul(g, hn::IfThenElse(hn::Gt(v, hn::Zero(d)), hn::Set(d, hn::TFromD<D>(1)),
                                   exp_nonpositive(d, v)));
}

// out [n] <- op(whole vectors of the inputs [n]); the last n % lanes elements through a padded
// copy, so that every element goes through the same vector arithmetic.
template <class T, class Op>
void map_rows(const T* x, const T* g, std::int64_t n, T* out, Op op) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t c = 0;
  for (; c + L <= n; c += L) {
    hn::StoreU(op(d, hn::LoadU(d, x + c), g ? hn::LoadU(d, g + c) : hn::Zero(d)), d, out + c);
  }
  if (c == n) return;
  HWY_ALIGN T xs[HWY_MAX_BYTES / sizeof(T)] = {}, gs[HWY_MAX_BYTES / sizeof(T)] = {};
  std::copy(x + c, x + n, xs);
  if (g) std::copy(g + c, g + n, gs);
  hn::Store(op(d, hn::Load(d, xs), hn::Load(d, gs)), d, xs);
  std::copy(xs, xs + (n - c), out + c);
}

template <class T>
void features(const T* x, std::int64_t n, T* f) {
  map_rows(x, static_cast<const T*>(nullptr), n, f,
           [](auto d, auto v, auto) { return feature(d, v); });
}

template <class T>
void feature_grads(const T* x, const T* g, std::int64_t n, T* out) {
  map_rows(x, g, n, out, [](auto d, auto v, auto gv) { return feature_grad(d, v, gv); });
}

template <class T>
void exp_shifted(const T* u, std::int64_t n, T shift, T factor, T* f) {
  map_rows(u, static_cast<const T*>(nullptr), n, f, [shift, factor](auto d, auto v, auto) {
    return hn::Mul(hn::Set(d, factor), exp_nonpositive(d, hn::Sub(v, hn::Set(d, shift))));
  });
}

void FeaturesF32(const float* x, std::int64_t n, float* f) { features(x, n, f); }
void FeaturesF64(const double* x, std::int64_t n, double* f) { features(x, n, f); }
void FeatureGradsF32(const float* x, const float* g, std::int64_t n, float* out) {
  feature_grads(x, g, n, out);
}
void FeatureGradsF64(const double* x, const double* g, std::int64_t n, double* out) {
  feature_grads(x, g, n, out);
}

void ExpFeaturesF32(const float* u, std::int64_t n, float shift, float factor, float* f) {
  exp_shifted(u, n, shift, factor, f);
}
void ExpFeaturesF64(const double* u, std::int64_t n, double shift, double factor, double* f) {
  exp_shifted(u, n, shift, factor, f);
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(FeaturesF32);
HWY_EXPORT(FeaturesF64);
HWY_EXPORT(FeatureGradsF32);
HWY_EXPORT(FeatureGradsF64);
HWY_EXPORT(ExpFeaturesF32);
HWY_EXPORT(ExpFeaturesF64);

void elu_features(const float* x, std::int64_t n, float* f) {
  HWY_DYNAMIC_DISPATCH(FeaturesF32)(x, n, f);
}
void elu_features(const double* x, std::int64_t n, double* f) {
  HWY_DYNAMIC_DISPATCH(FeaturesF64)(x, n, f);
}
void elu_feature_grads(const float* x, const float* g, std::int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(FeatureGradsF32)(x, g, n, out);
}
void elu_feature_grads(const double* x, const double* g, std::int64_t n, double* out) {
  HWY_DYNAMIC_DISPATCH(FeatureGradsF64)(x, g, n, out);
}

void exp_features(const float* u, std::int64_t n, float shift, float factor, float* f) {
  HWY_DYNAMIC_DISPATCH(ExpFeaturesF32)(u, n, shift, factor, f);
}
void exp_features(const double* u, std::int64_t n, double shift, double factor, double* f) {
  HWY_DYNAMIC_DISPATCH(ExpFeaturesF64)(u, n, shift, factor, f);
}

}  // namespace qkv::kernels::cpu
#endif
