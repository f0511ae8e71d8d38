// Loads of a row stored as E into lanes of the compute type T: E = T as it is, E = Bf16 or F16
// (kernels/half_kv.hpp) converted exactly to f32. Per-target include guard.
#if defined(QKV_KERNELSCPU_LOAD_AS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELSCPU_LOAD_AS_INL_H_
#undef QKV_KERNELSCPU_LOAD_AS_INL_H_
#else
#define QKV_KERNELSCPU_LOAD_AS_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "kernels/half_kv.hpp"
#include "kernels/params.hpp"
#include "qkv/half.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes(d) elements from p, unaligned.
template <class D>
hn::Vec<D> load_as(D d, const hn::TFromD<D>* HWY_RESTRICT p) {
  return hn::LoadU(d, p);
}
template <class D>
hn::Vec<D> load_as(D d, const Bf16* HWY_RESTRICT p) {
  const hn::Rebind<std::uint16_t, D> du;
  const hn::Rebind<hwy::bfloat16_t, D> dh;
  return hn::PromoteTo(d, hn::BitCast(dh, hn::LoadU(du, &p->bits)));
}

// Whether this target's f16 conversion is Highway's software one: 1.0.3 converts in software on
// x86 below AVX2 (no F16C) and on EMU128 and SCALAR, and there takes an exponent of all ones
// (infinity, NaN) for a finite number of 2^16 and more (a NaN key read as 98304.0).
#if (HWY_ARCH_X86 && HWY_TARGET >= HWY_SSE4) || HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
inline constexpr bool kSoftwareF16 = true;
#else
inline constexpr bool kSoftwareF16 = false;
#endif

template <class D>
hn::Vec<D> load_as(D d, const F16* HWY_RESTRICT p) {
  const hn::Rebind<std::uint16_t, D> du;
  const hn::Rebind<hwy::float16_t, D> dh;
  const auto bits = hn::LoadU(du, &p->bits);
  const auto x = hn::PromoteTo(d, hn::BitCast(dh, bits));
  if constexpr (!kSoftwareF16) {
    return x;
  } else {
    // Infinities and NaNs as f16_bits_to_f32 (qkv/half.hpp) and F16C give them: the sign, an
    // exponent of all ones, the mantissa shifted up.
    const hn::RebindToUnsigned<D> du32;
    const auto wide = hn::PromoteTo(du32, bits);
    const auto exponent = hn::Set(du32, 0x7C00u);
    const auto special = hn::Eq(hn::And(wide, exponent), exponent);
    const auto ieee = hn::Or(hn::ShiftLeft<16>(hn::And(wide, hn::Set(du32, 0x8000u))),
                             hn::Or(hn::Set(du32, 0x7F800000u),
                                    hn::ShiftLeft<13>(hn::And(wide, hn::Set(du32, 0x3FFu)))));
    return hn::IfThenElse(hn::RebindMask(d, special), hn::BitCast(d, ieee), x);
  }
}

// One element, for the tails.
template <class T>
T value_as(T x) {
  return x;
}
template <class T>
T value_as(Bf16 x) {
  return bf16_bits_to_f32(x.bits);
}
template <class T>
T value_as(F16 x) {
  return f16_bits_to_f32(x.bits);
}

// The rows of a 16-bit tensor (kernels/half_kv.hpp) seen as elements of format E.
template <class E>
Rows<const E> tagged(const Rows<const std::uint16_t>& bits) {
  return {reinterpret_cast<const E*>(bits.data), bits.batch, bits.row, bits.head};
}

// f(k, v) with a 16-bit K and V seen in their format (Rows<const Bf16> or Rows<const F16>), and
// true; false, without calling f, where half.kind is none.
template <class F>
bool visit_half(const HalfKv& half, F&& f) {
  if (half.kind == HalfKind::bf16) {
    f(tagged<Bf16>(half.k), tagged<Bf16>(half.v));
    return true;
  }
  if (half.kind == HalfKind::f16) {
    f(tagged<F16>(half.k), tagged<F16>(half.v));
    return true;
  }
  return false;
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif
