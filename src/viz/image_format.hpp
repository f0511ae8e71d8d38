#pragma once

#include <filesystem>

namespace qkv::viz {

enum class ImageFormat { png, svg };

// From the extension, .png or .svg in any case; anything else is a qkv::Error naming "path".
ImageFormat image_format(const std::filesystem::path& path);

}  // namespace qkv::viz
