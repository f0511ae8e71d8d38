#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/tensor.hpp"
#include "qkv/viz/heatmap.hpp"

namespace qkv::viz {

// Everything a renderer draws, validated: a renderer only places it.
struct Figure {
  std::int64_t panels = 0, rows = 0, cols = 0;
  std::vector<double> values;  // [panels, rows, cols] row-major
  double vmin = 0.0, vmax = 1.0;
  std::vector<std::string> x_labels, y_labels,
      titles;  // resolved: indices or "head p" if not given
  std::string title;
  HeatmapLayout layout;
  struct Tick {
    int y;  // pixel row on the color bar
    std::string label;
  };
  std::vector<Tick> ticks;  // vmin at the bottom of the bar to vmax at its top

  Rgb color(std::int64_t p, std::int64_t r, std::int64_t c) const;
};

// weights [R, C] or [P, R, C], any floating dtype and strides. Throws qkv::Error for anything
// heatmap_layout rejects, a weights tensor of another rank or dtype, and infinite weights.
Figure make_figure(const Tensor& weights, const HeatmapOptions& options);

}  // namespace qkv::viz
