#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace qkv {

// Storage types. Floating types take part in arithmetic; boolean (one byte, 0 or 1) carries
// keep-masks.
enum class DType : std::uint8_t { f64, f32, bf16, f16, boolean };

std::size_t dtype_size(DType dtype) noexcept;
std::string_view dtype_name(DType dtype) noexcept;
bool is_floating(DType dtype) noexcept;

}  // namespace qkv
