#pragma once

#include <cstdint>

namespace qkv::viz {

// An 8-bit sRGB color, as PNG stores it and SVG writes it (#rrggbb).
struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

}  // namespace qkv::viz
