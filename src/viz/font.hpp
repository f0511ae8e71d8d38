#pragma once

#include <cstdint>

namespace qkv::viz::font {

// The embedded bitmap font (font_data.cpp, written by make_font.py): DejaVu Sans Mono at
// kPixelSize px in cells of kWidth x kHeight pixels, printable ASCII only.
inline constexpr int kWidth = 7;
inline constexpr int kHeight = 13;
inline constexpr int kBaseline = 10;  // rows above the baseline
inline constexpr int kFirst = 32;     // ' '
inline constexpr int kLast = 126;     // '~'
// The size the bitmaps were rasterized at; the SVG asks for the same so both have one layout.
inline constexpr double kPixelSize = 11.6;

extern const char kCoverageHex[];

// Ink coverage 0..255 of code point c at (x, y) of its cell; anything outside kFirst..kLast is
// drawn as '?'.
std::uint8_t coverage(char32_t c, int x, int y);

}  // namespace qkv::viz::font
