#pragma once

#include <string_view>

namespace qkv {

std::string_view version() noexcept;  // "0.1.0"

}  // namespace qkv
