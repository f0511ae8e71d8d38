// f32 or f64 values as lanes of double, and back, for the row passes that compute in double
// (kernels/cpu/layer_norm.cpp, cross_entropy.cpp, optimizer_update.cpp). Per-target include guard.
#if defined(QKV_KERNELSCPU_AS_DOUBLE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELSCPU_AS_DOUBLE_INL_H_
#undef QKV_KERNELSCPU_AS_DOUBLE_INL_H_
#else
#define QKV_KERNELSCPU_AS_DOUBLE_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// T's (float or double) values at p + i as the lanes of d (double), exactly.
template <class D, class T>
hn::Vec<D> LoadDouble(D d, const T* p, std::int64_t i) {
  if constexpr (sizeof(T) == 4) {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<T, D>(), p + i));
  } else {
    return hn::LoadU(d, p + i);
  }
}

// The lanes of v (double) to p + i, each rounded once to T.
template <class D, class T>
void StoreDouble(D d, hn::Vec<D> v, T* p, std::int64_t i) {
  if constexpr (sizeof(T) == 4) {
    hn::StoreU(hn::DemoteTo(hn::Rebind<T, D>(), v), hn::Rebind<T, D>(), p + i);
  } else {
    hn::StoreU(v, d, p + i);
  }
}

// fn(d, i) over [0, n): whole vectors of double, then single lanes.
template <class Fn>
void ForLanes(std::int64_t n, Fn fn) {
  const hn::ScalableTag<double> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + L <= n; i += L) fn(d, i);
  const hn::CappedTag<double, 1> d1;
  for (; i < n; ++i) fn(d1, i);
}

// The sum of a sum ForLanes split in two: the lanes of acc (its whole vectors) plus tail (its
// single lanes).
template <class V>
double SumWithTail(V acc, double tail) {
  return hn::GetLane(hn::SumOfLanes(hn::ScalableTag<double>(), acc)) + tail;
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELSCPU_AS_DOUBLE_INL_H_
