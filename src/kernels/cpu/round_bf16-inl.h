// f32 rounded to bf16 bits in vectors, as qkv::f32_to_bf16_bits rounds one value (nearest, ties
// to even; a NaN stays a NaN, made quiet): the bf16 products' operands that the kernels compute
// (P, dS). One element at a time, the rounding cost as much as a tile's products. Per-target
// include guard.
#if defined(QKV_KERNELS_CPU_ROUND_BF16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_CPU_ROUND_BF16_INL_H_
#undef QKV_KERNELS_CPU_ROUND_BF16_INL_H_
#else
#define QKV_KERNELS_CPU_ROUND_BF16_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "qkv/half.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The bf16 bits of the lanes of v, in the low 16 bits of each 32-bit lane (the high 16 zero).
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> bf16_bits(DF df, hn::Vec<DF> v) {
  const hn::RebindToSigned<decltype(df)> di;
  const auto low16 = hn::Set(di, 0xffff);
  const auto bits = hn::BitCast(di, v);
  const auto top = hn::And(hn::ShiftRight<16>(bits), low16);
  const auto even = hn::And(top, hn::Set(di, 1));
  const auto rounded =
      hn::And(hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(di, 0x7fff), even))), low16);
  return hn::IfThenElse(hn::RebindMask(di, hn::IsNaN(v)), hn::Or(top, hn::Set(di, 0x40)), rounded);
}

// dst [n] <- x [n] rounded to bf16 bits.
HWY_INLINE void round_bf16(const float* x, std::uint16_t* dst, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<std::uint16_t, decltype(df)> d16;
  const auto L = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t i = 0;
  for (; i + L <= n; i += L)
    hn::StoreU(hn::DemoteTo(d16, bf16_bits(df, hn::LoadU(df, x + i))), d16, dst + i);
  for (; i < n; ++i) dst[i] = f32_to_bf16_bits(x[i]);
}

// dst [n] pairs <- rows even and odd [n] rounded to bf16 (odd null: zeros), interleaved as B of
// bf16_gemm.hpp reads two rows of its depth: dst[2 c] = even[c], dst[2 c + 1] = odd[c].
HWY_INLINE void round_bf16_pairs(const float* even, const float* odd, std::uint16_t* dst,
                                 std::int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  const auto L = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t c = 0;
  for (; c + L <= n; c += L) {
    const auto lo = bf16_bits(df, hn::LoadU(df, even + c));
    const auto hi = odd != nullptr ? bf16_bits(df, hn::LoadU(df, odd + c)) : hn::Zero(di);
    hn::StoreU(hn::BitCast(du, hn::Or(lo, hn::ShiftLeft<16>(hi))), du,
               reinterpret_cast<std::uint32_t*>(dst) + c);
  }
  for (; c < n; ++c) {
    dst[2 * c] = f32_to_bf16_bits(even[c]);
    dst[2 * c + 1] = odd != nullptr ? f32_to_bf16_bits(odd[c]) : std::uint16_t{0};
  }
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_CPU_ROUND_BF16_INL_H_
