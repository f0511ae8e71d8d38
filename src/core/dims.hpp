#pragma once

#include <cstdint>
#include <string>

#include "qkv/error.hpp"

namespace qkv::core {

// The dimension d (negative counts from the end) of a rank-`rank` tensor; throws qkv::Error
// naming `argument` when d is out of range.
inline std::int64_t wrap_dim(std::int64_t d, std::int64_t rank, const char* argument) {
  const std::int64_t wrapped = d < 0 ? d + rank : d;
  if (wrapped < 0 || wrapped >= rank) {
    throw Error(argument,
                "a dimension in [" + std::to_string(-rank) + ", " + std::to_string(rank) + ")",
                std::to_string(d));
  }
  return wrapped;
}

}  // namespace qkv::core
