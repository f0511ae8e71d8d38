#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

namespace qkv::test {

// A binary floating format described by its numbers, not its bits: significand bits (with the
// implicit one), the exponent of the smallest normal and the largest finite value.
struct BinaryFormat {
  int precision;
  int min_exponent;
  double max_finite;
};

inline constexpr BinaryFormat kF16Format{11, -14, 65504.0};
inline constexpr BinaryFormat kBf16Format{8, -126, 0x1.fep127};
inline constexpr BinaryFormat kF32Format{24, -126, 0x1.fffffep127};

// Rounds x to the nearest value of the format, ties to even, in double arithmetic: a second
// implementation of the rounding rule that shares nothing with qkv's bit manipulation. Scaling
// by a power of two and std::nearbyint (default rounding mode: nearest, ties to even) are exact,
// and the parity of the scaled integer is the parity of the last significand bit.
inline double round_to_format(double x, const BinaryFormat& format) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  const int exponent = std::max(std::ilogb(x), format.min_exponent);
  const int quantum = exponent - (format.precision - 1);
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
  if (std::fabs(rounded) > format.max_finite) {
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  }
  return rounded == 0.0 ? std::copysign(0.0, x) : rounded;
}

}  // namespace qkv::test
