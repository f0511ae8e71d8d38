// PNG heatmaps: the figure is drawn into a Canvas, then encoded by save_png.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>

#include "qkv/viz/heatmap.hpp"
#include "viz/canvas.hpp"
#include "viz/figure.hpp"
#include "viz/font.hpp"
#include "viz/layout.hpp"
#include "viz/text.hpp"

namespace qkv::viz {
namespace {

void draw(const Figure& figure, Canvas& canvas) {
  const HeatmapLayout& layout = figure.layout;
  const int cell = layout.cell_size;
  const int grid_w = static_cast<int>(figure.cols) * cell;
  const int grid_h = static_cast<int>(figure.rows) * cell;
  constexpr int kH = font::kHeight;
  if (!figure.title.empty()) {
    canvas.text((layout.width - text_width(figure.title)) / 2, kMargin, figure.title, kInk);
  }
  for (std::int64_t p = 0; p < figure.panels; ++p) {
    const int x0 = layout.panel_x[p];
    const int y0 = layout.panel_y;
    const std::string& title = figure.titles[p];
    canvas.text(x0 + (grid_w - text_width(title)) / 2, y0 - kGap - kH, title, kInk);
    for (std::int64_t r = 0; r < figure.rows; ++r) {
      for (std::int64_t c = 0; c < figure.cols; ++c) {
        canvas.fill(x0 + int(c) * cell, y0 + int(r) * cell, cell, cell, figure.color(p, r, c));
      }
    }
    for (std::int64_t r = 0; r < figure.rows; r += layout.y_label_step) {
      const std::string& label = figure.y_labels[r];
      canvas.text(x0 - kGap - text_width(label), y0 + int(r) * cell + (cell - kH) / 2, label, kInk);
    }
    for (std::int64_t c = 0; c < figure.cols; c += layout.x_label_step) {
      const std::string& label = figure.x_labels[c];
      const int center = x0 + int(c) * cell + cell / 2;
      const int top = y0 + grid_h + kGap;
      if (layout.x_labels_vertical) {
        canvas.text_up(center - kH / 2, top + text_width(label), label, kInk);
      } else {
        canvas.text(center - text_width(label) / 2, top, label, kInk);
      }
    }
  }
  const int bar_x = layout.colorbar_x;
  const int bar_y = layout.colorbar_y;
  const int bar_h = layout.colorbar_height;
  for (int j = 0; j < bar_h; ++j) {
    canvas.fill(bar_x, bar_y + j, layout.colorbar_width, 1,
                viridis(1.0 - static_cast<double>(j) / std::max(bar_h - 1, 1)));
  }
  const int bar_right = bar_x + layout.colorbar_width;
  for (const Figure::Tick& tick : figure.ticks) {
    canvas.fill(bar_right, tick.y, kTickLength, 1, kInk);
    canvas.text(bar_right + kTickLength + kTextPad, tick.y - kH / 2, tick.label, kInk);
  }
}

}  // namespace

// weights [R, C] or [P, R, C]
void write_heatmap_png(const Tensor& weights, const HeatmapOptions& options,
                       const std::filesystem::path& path) {
  const Figure figure = make_figure(weights, options);
  Canvas canvas(figure.layout.width, figure.layout.height);
  draw(figure, canvas);
  save_png(canvas, path);
}

}  // namespace qkv::viz
