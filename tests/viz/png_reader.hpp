#pragma once

#include <png.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "qkv/viz/heatmap.hpp"

namespace qkv::viz::testing {

// A PNG read back with libpng as 8-bit RGB; width 0 when libpng rejects the file.
struct Picture {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> rgb;
  Rgb at(int x, int y) const {
    const std::uint8_t* px = &rgb[3 * (static_cast<std::size_t>(y) * width + x)];
    return {px[0], px[1], px[2]};
  }
};

inline Picture read_png(const std::filesystem::path& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  Picture picture;
  if (!png_image_begin_read_from_file(&image, path.c_str())) return picture;
  image.format = PNG_FORMAT_RGB;
  std::vector<std::uint8_t> rgb(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, rgb.data(), 0, nullptr)) return picture;
  picture.width = static_cast<int>(image.width);
  picture.height = static_cast<int>(image.height);
  picture.rgb = std::move(rgb);
  return picture;
}

// The 8-byte PNG signature, read without libpng.
inline bool has_png_signature(const std::filesystem::path& path) {
  static constexpr unsigned char kSignature[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::ifstream file(path, std::ios::binary);
  unsigned char head[8] = {};
  file.read(reinterpret_cast<char*>(head), 8);
  return file && std::equal(head, head + 8, kSignature);
}

}  // namespace qkv::viz::testing
