#pragma once

// Element conversions of whole runs between floating dtypes, typed once per run instead of per
// element (Tensor::copy_from's contiguous path), with the same rounding as
// detail::store_element(to, detail::load_element(from)).

#include <cstddef>
#include <cstdint>

#include "qkv/dtype.hpp"

namespace qkv::detail {

// dst [n] of dtype `to` <- src [n] of dtype `from`, both contiguous, for f64, f32, bf16 and f16
// (to != from), and true; false, writing nothing, for any other pair.
bool convert_run(DType to, std::byte* dst, DType from, const std::byte* src, std::int64_t n);

}  // namespace qkv::detail
