#pragma once

// The numbers of each floating dtype the fuzz target's inputs and checks are built from.

#include <qkv/dtype.hpp>

namespace qkv::fuzz {

struct DTypeLimits {
  double epsilon;          // the distance from 1 to the next number
  double largest;          // the largest finite number (bf16: f32's, an upper bound)
  double smallest_normal;  // below it, numbers lose digits
  double subnormal;        // one subnormal number
};

inline DTypeLimits limits(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {0x1p-52, 0x1.fffffffffffffp1023, 0x1p-1022, 0x1p-1060};
    case DType::f16:
      return {0x1p-10, 65504.0, 0x1p-14, 0x1p-20};
    case DType::bf16:
      return {0x1p-7, 0x1.fffffep127, 0x1p-126, 0x1p-140};
    default:
      return {0x1p-23, 0x1.fffffep127, 0x1p-126, 0x1p-140};
  }
}

}  // namespace qkv::fuzz
