#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/tensor.hpp"
#include "qkv/viz/color.hpp"

namespace qkv::viz {

// Heatmaps of attention weights (target qkv::viz, a separate library so qkv::qkv needs no
// libpng). A figure is one panel per head side by side, each with the row (query) labels on the
// left, the column (key) labels along the bottom and a title above, and one color bar with ticks
// on the right shared by every panel. Colors are viridis from vmin = min(0, smallest weight) to
// vmax; values above vmax take the top color, NaN a gray that viridis never takes.

struct HeatmapOptions {
  std::vector<std::string> x_labels;  // one per column (keys, e.g. source words); empty = indices
  std::vector<std::string> y_labels;  // one per row (queries, e.g. target words); empty = indices
  std::vector<std::string> panel_titles;  // one per panel; empty = "head 0", "head 1", ...
  std::string title;                      // over the whole figure; may be empty
  int cell_size = 0;  // pixels per cell; 0 = chosen from the size (>= label height)
  double vmax = 0.0;  // color scale top; 0 = the maximum of the weights (bottom is 0)
};

// Where everything goes, in pixels from the top-left corner; PNG and SVG share it.
struct HeatmapLayout {
  int width = 0;   // of the whole image
  int height = 0;  // of the whole image
  int cell_size = 0;
  std::vector<int> panel_x;  // left edge of column 0 of each panel
  int panel_y = 0;           // top edge of row 0 (the same in every panel)
  int x_label_step = 1;      // every x_label_step-th column is labeled, so labels never overlap
  int y_label_step = 1;      // every y_label_step-th row is labeled
  bool x_labels_vertical =
      false;           // column labels read bottom to top when they are wider than a cell
  int colorbar_x = 0;  // the color bar's rectangle: vmax at the top, vmin at the bottom
  int colorbar_y = 0;
  int colorbar_width = 0;
  int colorbar_height = 0;
};

// The layout of a figure of `panels` panels of rows x cols cells. Throws qkv::Error for sizes
// < 1, label or title counts that do not match, a negative cell_size or vmax, or an image of
// more than 2^26 pixels.
HeatmapLayout heatmap_layout(std::int64_t rows, std::int64_t cols, std::int64_t panels,
                             const HeatmapOptions& options);

// Viridis at t in [0, 1] (clamped): dark purple (68, 1, 84) at 0, yellow (253, 231, 37) at 1.
Rgb viridis(double t);
// The color of NaN weights.
inline constexpr Rgb kNanColor{160, 160, 160};

// weights [R, C] or [P, R, C] (any floating dtype, any strides): panel p shows weights[p].
// Weights must be finite or NaN. Throws qkv::Error naming the argument (weights, options.*,
// path) and writes no file when anything is wrong.
void write_heatmap_png(const Tensor& weights, const HeatmapOptions& options,
                       const std::filesystem::path& path);
void write_heatmap_svg(const Tensor& weights, const HeatmapOptions& options,
                       const std::filesystem::path& path);
// Picks PNG or SVG from the extension (.png / .svg, any case), else qkv::Error naming "path".
void write_heatmap(const Tensor& weights, const HeatmapOptions& options,
                   const std::filesystem::path& path);

}  // namespace qkv::viz
