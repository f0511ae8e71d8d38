// write_heatmap: the format from the file name.
#include "qkv/viz/heatmap.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "qkv/error.hpp"

namespace qkv::viz {

// weights [R, C] or [P, R, C]
void write_heatmap(const Tensor& weights, const HeatmapOptions& options,
                   const std::filesystem::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (extension == ".png") {
    write_heatmap_png(weights, options, path);
  } else if (extension == ".svg") {
    write_heatmap_svg(weights, options, path);
  } else {
    throw Error("path", "a file name ending in .png or .svg", path.string());
  }
}

}  // namespace qkv::viz
