#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "qkv/viz/color.hpp"

namespace qkv::viz {

// Text and lines: near black, softer than pure black.
inline constexpr Rgb kInk{32, 32, 32};

// An RGB picture the PNG writers draw into: text from the embedded font blended by its coverage.
class Canvas {
 public:
  // White, like the page the figure goes on.
  Canvas(int width, int height);

  int width() const { return width_; }
  int height() const { return height_; }
  const std::uint8_t* data() const { return rgb_.data(); }

  // color over the pixel with opacity alpha (0..255). Pixels outside the canvas are dropped, so
  // callers need not clip.
  void blend(int x, int y, Rgb color, int alpha);
  void fill(int x, int y, int w, int h, Rgb color);
  // Horizontal text whose cells start at (x, top).
  void text(int x, int top, std::string_view text, Rgb color);
  // Text turned 90 degrees counterclockwise, reading upwards from bottom, the tops of the letters
  // facing left, the letters' cells in columns [left, left + font::kHeight).
  void text_up(int left, int bottom, std::string_view text, Rgb color);

 private:
  int width_, height_;
  std::vector<std::uint8_t> rgb_;
};

// Encodes the canvas with libpng's simplified API. Throws qkv::Error naming "path" (and leaves no
// partial file) when it cannot be written.
void save_png(const Canvas& canvas, const std::filesystem::path& path);

}  // namespace qkv::viz
