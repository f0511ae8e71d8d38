// write_heatmap: the format from the file name.
#include "qkv/viz/heatmap.hpp"

#include "viz/image_format.hpp"

namespace qkv::viz {

// weights [R, C] or [P, R, C]
void write_heatmap(const Tensor& weights, const HeatmapOptions& options,
                   const std::filesystem::path& path) {
  if (image_format(path) == ImageFormat::png) {
    write_heatmap_png(weights, options, path);
  } else {
    write_heatmap_svg(weights, options, path);
  }
}

}  // namespace qkv::viz
