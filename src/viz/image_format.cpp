#include "viz/image_format.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "qkv/error.hpp"

namespace qkv::viz {

ImageFormat image_format(const std::filesystem::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (extension == ".png") return ImageFormat::png;
  if (extension == ".svg") return ImageFormat::svg;
  throw Error("path", "a file name ending in .png or .svg", path.string());
}

}  // namespace qkv::viz
