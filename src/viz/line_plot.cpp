// write_line_plot: the format from the file name.
#include "qkv/viz/line_plot.hpp"

#include "viz/image_format.hpp"

namespace qkv::viz {

void write_line_plot(const std::vector<Series>& series, const LinePlotOptions& options,
                     const std::filesystem::path& path) {
  if (image_format(path) == ImageFormat::png) {
    write_line_plot_png(series, options, path);
  } else {
    write_line_plot_svg(series, options, path);
  }
}

}  // namespace qkv::viz
