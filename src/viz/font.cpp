#include "viz/font.hpp"

namespace qkv::viz::font {
namespace {

int hex_digit(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

}  // namespace

std::uint8_t coverage(char32_t c, int x, int y) {
  const int glyph = (c >= kFirst && c <= kLast) ? static_cast<int>(c) - kFirst : '?' - kFirst;
  const char* at = kCoverageHex + 2 * ((glyph * kHeight + y) * kWidth + x);  // 2 hex digits a pixel
  return static_cast<std::uint8_t>(hex_digit(at[0]) * 16 + hex_digit(at[1]));
}

}  // namespace qkv::viz::font
