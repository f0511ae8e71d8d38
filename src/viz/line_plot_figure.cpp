#include "viz/line_plot_figure.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace qkv::viz {
namespace {

// A rectangle in pixel coordinates, edges included.
struct Box {
  double x0, y0, x1, y1;
  bool contains(PlotPoint p) const { return p.x >= x0 && p.x <= x1 && p.y >= y0 && p.y <= y1; }
};

// The edges of the pixels of `rect`, grown by `margin` on every side.
Box box_around(const PixelRect& rect, double margin) {
  return {rect.x - 0.5 - margin, rect.y - 0.5 - margin, rect.x + rect.width - 0.5 + margin,
          rect.y + rect.height - 0.5 + margin};
}

// Liang-Barsky: the part of a + t (b - a), t in [0, 1], inside the box, as [t0, t1]; false when
// none of it is.
bool clip(PlotPoint a, PlotPoint b, const Box& box, double& t0, double& t1) {
  const double dx = b.x - a.x;
  const double dy = b.y - a.y;
  const double p[4] = {-dx, dx, -dy, dy};
  const double q[4] = {a.x - box.x0, box.x1 - a.x, a.y - box.y0, box.y1 - a.y};
  t0 = 0.0;
  t1 = 1.0;
  for (int k = 0; k < 4; ++k) {
    if (p[k] == 0) {
      if (q[k] < 0) return false;
      continue;
    }
    const double r = q[k] / p[k];
    if (p[k] < 0) {
      t0 = std::max(t0, r);
    } else {
      t1 = std::min(t1, r);
    }
  }
  return t0 <= t1;
}

PlotLine resolve(const Series& series, Rgb color, const LinePlotLayout& layout) {
  PlotLine line{series.name, color, series.marker, series.line, {}, {}};
  // Lines may run a line width past the axes (the renderers clip them there); markers are drawn
  // for points on the axes' pixels.
  const Box stroke_box = box_around(layout.axes, kLineWidth);
  const Box marker_box = box_around(layout.axes, 0.0);
  std::vector<PlotPoint> piece;
  const auto finish = [&] {
    if (piece.size() >= 2) line.strokes.push_back(piece);
    piece.clear();
  };
  bool have_previous = false;
  PlotPoint previous;
  for (std::size_t i = 0; i < series.x.size(); ++i) {
    const PlotPoint p{layout.pixel_x(series.x[i]), layout.pixel_y(series.y[i])};
    // A finite value far outside tight limits can still overflow to an infinite pixel.
    if (!drawable(series.x[i], layout.log_x) || !drawable(series.y[i], layout.log_y) ||
        !std::isfinite(p.x) || !std::isfinite(p.y)) {
      finish();
      have_previous = false;
      continue;
    }
    if (marker_box.contains(p)) line.markers.push_back(p);
    double t0 = 0.0;
    double t1 = 0.0;
    if (have_previous && clip(previous, p, stroke_box, t0, t1)) {
      const double dx = p.x - previous.x;
      const double dy = p.y - previous.y;
      if (piece.empty() || t0 > 0) {
        finish();
        piece.push_back({previous.x + t0 * dx, previous.y + t0 * dy});
      }
      piece.push_back({previous.x + t1 * dx, previous.y + t1 * dy});
      if (t1 < 1) finish();
    } else {
      finish();
    }
    previous = p;
    have_previous = true;
  }
  finish();
  return line;
}

}  // namespace

DashPattern dash_pattern(LineStyle style) {
  switch (style) {
    case LineStyle::dashed:
      return {6.0, 4.0};
    case LineStyle::dotted:
      return {2.0, 3.0};
    case LineStyle::solid:
      break;
  }
  return {};
}

std::vector<PlotPoint> marker_outline(Marker marker) {
  switch (marker) {
    case Marker::square:
      return {{-3, -3}, {3, -3}, {3, 3}, {-3, 3}};
    case Marker::triangle:
      return {{0, -4.5}, {4, 3}, {-4, 3}};
    case Marker::diamond:
      return {{0, -4.5}, {4.5, 0}, {0, 4.5}, {-4.5, 0}};
    case Marker::none:
    case Marker::circle:
      break;
  }
  return {};
}

LinePlot make_line_plot(const std::vector<Series>& series, const LinePlotOptions& options) {
  LinePlot plot{
      line_plot_layout(series, options), options.title, options.x_label, options.y_label, {}};
  std::size_t palette_next = 0;
  for (const Series& s : series) {
    const Rgb color = s.color ? *s.color : kPalette[palette_next++ % kPalette.size()];
    plot.lines.push_back(resolve(s, color, plot.layout));
  }
  return plot;
}

}  // namespace qkv::viz
