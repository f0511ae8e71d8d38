// PNG line plots: the plot is drawn into a Canvas, then encoded by save_png.
#include <filesystem>
#include <vector>

#include "qkv/viz/line_plot.hpp"
#include "viz/canvas.hpp"
#include "viz/font.hpp"
#include "viz/layout.hpp"
#include "viz/line_plot_figure.hpp"
#include "viz/raster.hpp"

namespace qkv::viz {
namespace {

void draw_frame(Canvas& canvas, const PixelRect& rect, Rgb color) {
  canvas.fill(rect.x, rect.y, rect.width, 1, color);
  canvas.fill(rect.x, rect.y + rect.height - 1, rect.width, 1, color);
  canvas.fill(rect.x, rect.y, 1, rect.height, color);
  canvas.fill(rect.x + rect.width - 1, rect.y, 1, rect.height, color);
}

void draw(const LinePlot& plot, Canvas& canvas) {
  const LinePlotLayout& layout = plot.layout;
  const PixelRect& axes = layout.axes;
  const int right = axes.x + axes.width - 1;
  const int bottom = axes.y + axes.height - 1;
  // Grid lines inside the frame, the major ones over the minor ones.
  for (const bool major : {false, true}) {
    const Rgb grid = major ? kGridMajor : kGridMinor;
    for (const AxisTick& tick : layout.x_ticks) {
      if (tick.major == major && tick.pixel > axes.x && tick.pixel < right) {
        canvas.fill(tick.pixel, axes.y + 1, 1, axes.height - 2, grid);
      }
    }
    for (const AxisTick& tick : layout.y_ticks) {
      if (tick.major == major && tick.pixel > axes.y && tick.pixel < bottom) {
        canvas.fill(axes.x + 1, tick.pixel, axes.width - 2, 1, grid);
      }
    }
  }
  // Every line, then every marker, so no line hides a point.
  for (const PlotLine& line : plot.lines) {
    stroke_polylines(canvas, line.strokes, line.color, dash_pattern(line.line), axes);
  }
  for (const PlotLine& line : plot.lines) {
    for (const PlotPoint& p : line.markers) fill_marker(canvas, p, line.marker, line.color, axes);
  }
  draw_frame(canvas, axes, kInk);
  for (const AxisTick& tick : layout.x_ticks) {
    canvas.fill(tick.pixel, bottom + 1, 1, tick.major ? kMajorTickLength : kMinorTickLength, kInk);
    canvas.text(tick.label_box.x, tick.label_box.y, tick.label, kInk);
  }
  for (const AxisTick& tick : layout.y_ticks) {
    const int length = tick.major ? kMajorTickLength : kMinorTickLength;
    canvas.fill(axes.x - length, tick.pixel, length, 1, kInk);
    canvas.text(tick.label_box.x, tick.label_box.y, tick.label, kInk);
  }
  canvas.text(layout.title.x, layout.title.y, plot.title, kInk);
  canvas.text(layout.x_label.x, layout.x_label.y, plot.x_label, kInk);
  canvas.text_up(layout.y_label.x, layout.y_label.y + layout.y_label.height, plot.y_label, kInk);

  draw_frame(canvas, layout.legend, kLegendFrame);
  for (std::size_t i = 0; i < plot.lines.size(); ++i) {
    const PlotLine& line = plot.lines[i];
    const PixelRect& row = layout.legend_rows[i];
    const double middle = row.y + kLegendRowHeight / 2;
    const std::vector<std::vector<PlotPoint>> sample = {
        {{double(row.x), middle}, {double(row.x + kSampleLength - 1), middle}}};
    stroke_polylines(canvas, sample, line.color, dash_pattern(line.line), row);
    fill_marker(canvas, {row.x + (kSampleLength - 1) / 2.0, middle}, line.marker, line.color, row);
    canvas.text(row.x + kSampleLength + kGap, row.y + (kLegendRowHeight - font::kHeight) / 2,
                line.name, kInk);
  }
}

}  // namespace

void write_line_plot_png(const std::vector<Series>& series, const LinePlotOptions& options,
                         const std::filesystem::path& path) {
  const LinePlot plot = make_line_plot(series, options);
  Canvas canvas(plot.layout.width, plot.layout.height);
  draw(plot, canvas);
  save_png(canvas, path);
}

}  // namespace qkv::viz
