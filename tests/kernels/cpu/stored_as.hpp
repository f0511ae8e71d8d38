// Values stored as a kernel's element type E (f32, f64, or the bits of bf16 and f16:
// kernels/half_kv.hpp) and read back, for the tests of the decode's dot products and row products.
#pragma once

#include <type_traits>

#include "kernels/half_kv.hpp"
#include "qkv/half.hpp"

namespace qkv::kernels::cpu {

// x rounded to E (bf16 and f16 from x's f32 rounding).
template <class E>
E stored(double x) {
  if constexpr (std::is_same_v<E, Bf16>) {
    return Bf16{f32_to_bf16_bits(static_cast<float>(x))};
  } else if constexpr (std::is_same_v<E, F16>) {
    return F16{f32_to_f16_bits(static_cast<float>(x))};
  } else {
    return static_cast<E>(x);
  }
}

// The value E holds, exactly.
template <class E>
double as_double(E x) {
  if constexpr (std::is_same_v<E, Bf16>) {
    return static_cast<double>(bf16_bits_to_f32(x.bits));
  } else if constexpr (std::is_same_v<E, F16>) {
    return static_cast<double>(f16_bits_to_f32(x.bits));
  } else {
    return static_cast<double>(x);
  }
}

}  // namespace qkv::kernels::cpu
