#pragma once

#include <ostream>

#include "qkv/dtype.hpp"

namespace qkv {

// Lets GoogleTest print a DType parameter by name ("f16") instead of as a raw byte; found by
// argument-dependent lookup, so it lives in qkv's namespace.
inline void PrintTo(DType dtype, std::ostream* os) { *os << dtype_name(dtype); }

}  // namespace qkv
