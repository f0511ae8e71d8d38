#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qkv/dtype.hpp"
#include "qkv/half.hpp"

namespace qkv::detail {

// binary64 -> binary32 rounded to odd: truncate, then set the last bit when anything was lost.
// Rounding that result to nearest-even in bf16 or f16 (at least 2 bits narrower) equals rounding
// the double directly, so conversions from f64 never round twice.
inline float f64_to_f32_round_odd(double value) noexcept {
  float rounded = static_cast<float>(value);
  if (std::isnan(value) || static_cast<double>(rounded) == value) return rounded;
  if (std::fabs(static_cast<double>(rounded)) > std::fabs(value)) {
    rounded = std::nextafter(rounded, 0.0f);
  }
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(rounded) | 1u);
}

inline double load_element(DType dtype, const std::byte* p) noexcept {
  switch (dtype) {
    case DType::f64: {
      double x;
      std::memcpy(&x, p, sizeof x);
      return x;
    }
    case DType::f32: {
      float x;
      std::memcpy(&x, p, sizeof x);
      return x;
    }
    case DType::bf16:
    case DType::f16: {
      std::uint16_t bits;
      std::memcpy(&bits, p, sizeof bits);
      return dtype == DType::bf16 ? bf16_bits_to_f32(bits) : f16_bits_to_f32(bits);
    }
    case DType::boolean:
      return *reinterpret_cast<const std::uint8_t*>(p) != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

inline void store_element(DType dtype, std::byte* p, double value) noexcept {
  switch (dtype) {
    case DType::f64:
      std::memcpy(p, &value, sizeof value);
      return;
    case DType::f32: {
      const float x = static_cast<float>(value);
      std::memcpy(p, &x, sizeof x);
      return;
    }
    case DType::bf16:
    case DType::f16: {
      const float x = f64_to_f32_round_odd(value);
      const std::uint16_t bits = dtype == DType::bf16 ? f32_to_bf16_bits(x) : f32_to_f16_bits(x);
      std::memcpy(p, &bits, sizeof bits);
      return;
    }
    case DType::boolean:
      *reinterpret_cast<std::uint8_t*>(p) = value != 0.0 ? 1 : 0;
      return;
  }
}

}  // namespace qkv::detail
