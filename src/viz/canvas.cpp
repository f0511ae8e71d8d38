#include "viz/canvas.hpp"

#include <png.h>

#include <string>
#include <system_error>

#include "qkv/error.hpp"
#include "viz/font.hpp"
#include "viz/text.hpp"

namespace qkv::viz {

Canvas::Canvas(int width, int height)
    : width_(width), height_(height), rgb_(3 * std::size_t(width) * height, 255) {}

void Canvas::blend(int x, int y, Rgb color, int alpha) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_ || alpha == 0) return;
  std::uint8_t* px = &rgb_[3 * (std::size_t(y) * width_ + x)];
  const std::uint8_t channels[3] = {color.r, color.g, color.b};
  for (int k = 0; k < 3; ++k) {
    px[k] = std::uint8_t((px[k] * (255 - alpha) + channels[k] * alpha + 127) / 255);
  }
}

void Canvas::fill(int x, int y, int w, int h, Rgb color) {
  for (int j = y; j < y + h; ++j) {
    for (int i = x; i < x + w; ++i) blend(i, j, color, 255);
  }
}

void Canvas::text(int x, int top, std::string_view text, Rgb color) {
  for (char32_t c : decode_utf8(text)) {
    for (int v = 0; v < font::kHeight; ++v) {
      for (int u = 0; u < font::kWidth; ++u) blend(x + u, top + v, color, font::coverage(c, u, v));
    }
    x += font::kWidth;
  }
}

void Canvas::text_up(int left, int bottom, std::string_view text, Rgb color) {
  for (char32_t c : decode_utf8(text)) {
    for (int v = 0; v < font::kHeight; ++v) {
      for (int u = 0; u < font::kWidth; ++u) {
        blend(left + v, bottom - 1 - u, color, font::coverage(c, u, v));
      }
    }
    bottom -= font::kWidth;
  }
}

void save_png(const Canvas& canvas, const std::filesystem::path& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(canvas.width());
  image.height = static_cast<png_uint_32>(canvas.height());
  image.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&image, path.c_str(), 0, canvas.data(), 0, nullptr)) {
    const std::string message = image.message;
    std::error_code ignored;
    std::filesystem::remove(path, ignored);  // libpng may have left a partial file
    throw Error("path", "a writable PNG file", path.string() + " (" + message + ")");
  }
}

}  // namespace qkv::viz
