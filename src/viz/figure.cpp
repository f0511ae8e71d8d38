#include "viz/figure.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "qkv/error.hpp"
#include "viz/layout.hpp"

namespace qkv::viz {

Rgb Figure::color(std::int64_t p, std::int64_t r, std::int64_t c) const {
  const double v = values[(p * rows + r) * cols + c];
  return std::isnan(v) ? kNanColor : viridis((v - vmin) / (vmax - vmin));
}

// weights [R, C] or [P, R, C]
Figure make_figure(const Tensor& weights, const HeatmapOptions& options) {
  if (!weights.defined()) throw Error("weights", "a defined tensor", "an undefined one");
  if (!is_floating(weights.dtype()) || (weights.dim() != 2 && weights.dim() != 3)) {
    throw Error("weights", "a floating tensor [R, C] or [P, R, C]", weights.describe());
  }
  Figure figure;
  figure.panels = weights.dim() == 3 ? weights.size(0) : 1;
  figure.rows = weights.size(-2);
  figure.cols = weights.size(-1);
  figure.layout = heatmap_layout(figure.rows, figure.cols, figure.panels, options);
  figure.values = weights.to_vector();
  double lowest = std::numeric_limits<double>::infinity();
  double highest = -lowest;
  for (std::size_t i = 0; i < figure.values.size(); ++i) {
    const double v = figure.values[i];
    if (std::isinf(v)) {
      throw Error("weights", "finite values (or NaN, drawn gray)",
                  std::to_string(v) + " at flat index " + std::to_string(i));
    }
    if (std::isnan(v)) continue;
    lowest = std::min(lowest, v);
    highest = std::max(highest, v);
  }
  const bool any = lowest <= highest;  // false when every weight is NaN
  figure.vmin = any ? std::min(0.0, lowest) : 0.0;
  figure.vmax = options.vmax > 0 ? options.vmax : any ? highest : 0.0;
  // All weights equal to vmin (all zero, say): any span draws them all in the bottom color.
  if (!(figure.vmax > figure.vmin)) figure.vmax = figure.vmin + 1;
  figure.x_labels = axis_labels(options.x_labels, figure.cols);
  figure.y_labels = axis_labels(options.y_labels, figure.rows);
  figure.titles = panel_titles(options.panel_titles, figure.panels);
  figure.title = options.title;
  const HeatmapLayout& layout = figure.layout;
  for (int i = 0; i < kTickCount; ++i) {
    const double fraction = static_cast<double>(i) / (kTickCount - 1);
    char label[32];
    std::snprintf(label, sizeof label, "%.3g",
                  figure.vmin + fraction * (figure.vmax - figure.vmin));
    const int y = layout.colorbar_y + layout.colorbar_height - 1 -
                  static_cast<int>(std::lround(fraction * (layout.colorbar_height - 1)));
    figure.ticks.push_back({y, label});
  }
  return figure;
}

}  // namespace qkv::viz
