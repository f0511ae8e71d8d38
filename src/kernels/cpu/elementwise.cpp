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

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(TanhF32);

void tanh_values(const float* x, std::int64_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(TanhF32)(x, n, y);
}

}  // namespace qkv::kernels::cpu
#endif
