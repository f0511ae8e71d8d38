#pragma once

#include <bit>
#include <cstdint>

namespace qkv {

// bfloat16: the top 16 bits of an IEEE binary32, rounded to nearest, ties to even.
constexpr std::uint16_t f32_to_bf16_bits(float value) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // NaN stays NaN, made quiet
  }
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

constexpr float bf16_bits_to_f32(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// IEEE binary16 (1 sign, 5 exponent, 10 mantissa bits), rounded to nearest, ties to even,
// with subnormals, overflow to infinity and NaN kept quiet.
constexpr std::uint16_t f32_to_f16_bits(float value) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) {  // at least 65520 = 65504 + half an ulp: rounds to infinity
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (magnitude < 0x38800000u) {    // below 2^-14: a subnormal half (or zero)
    if (magnitude < 0x33000000u) {  // at most 2^-25 (half the smallest subnormal): ties to 0
      return sign;
    }
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent;   // value = mantissa * 2^(exponent - 150)
    const std::uint32_t kept = mantissa >> shift;  // in units of 2^-24
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    const std::uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | rounded);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits. A carry
  // out of the mantissa correctly bumps the exponent.
  const std::uint32_t rebased = magnitude - (112u << 23);
  const std::uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rebased + rounding) >> 13));
}

constexpr float f16_bits_to_f32(std::uint16_t half) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  const std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1fu) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    // Subnormal or zero: mantissa * 2^-24, exact in binary32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Storage wrappers: 16 bits in memory, float when read.
struct bf16 {
  std::uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float value) noexcept : bits(f32_to_bf16_bits(value)) {}
  explicit operator float() const noexcept { return bf16_bits_to_f32(bits); }
};

struct f16 {
  std::uint16_t bits = 0;
  f16() = default;
  explicit f16(float value) noexcept : bits(f32_to_f16_bits(value)) {}
  explicit operator float() const noexcept { return f16_bits_to_f32(bits); }
};

}  // namespace qkv
