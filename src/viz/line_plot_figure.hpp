#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "qkv/viz/color.hpp"
#include "qkv/viz/line_plot.hpp"
#include "viz/font.hpp"

namespace qkv::viz {

// Sizes shared by line_plot_layout and the two renderers, in pixels.
inline constexpr int kMajorTickLength = 5;
inline constexpr int kMinorTickLength = 3;
inline constexpr int kMinAxesSize = 32;  // the smallest axes worth drawing, either way
inline constexpr int kLegendPad = 6;     // inside the legend's frame
inline constexpr int kLegendRowHeight = font::kHeight + 4;
inline constexpr int kSampleLength = 28;  // the stretch of line before each name in the legend
inline constexpr int kLegendGap = 20;     // between the axes and the legend
inline constexpr double kLineWidth = 2.0;
inline constexpr double kMarkerRadius = 3.5;  // of the circle; the polygons are about as large

inline constexpr Rgb kGridMajor{225, 225, 225};
inline constexpr Rgb kGridMinor{242, 242, 242};
inline constexpr Rgb kLegendFrame{170, 170, 170};

// Whether a point's coordinate can be drawn: finite, and > 0 on a log axis.
inline bool drawable(double value, bool log_axis) {
  return std::isfinite(value) && (!log_axis || value > 0);
}

// Dashes along a line: `on` pixels drawn then `off` pixels skipped (both 0 for a solid line).
struct DashPattern {
  double on = 0.0, off = 0.0;
};
DashPattern dash_pattern(LineStyle style);

// A point in pixel coordinates: n is the center of column (row) n.
struct PlotPoint {
  double x = 0.0, y = 0.0;
};

// The corners of a polygon marker around its center (y down); empty for circles and none.
std::vector<PlotPoint> marker_outline(Marker marker);

// One series, resolved: its color, and its points in pixels, split where points are skipped and
// clipped to a little beyond the axes, so renderers meet only short, finite coordinates.
struct PlotLine {
  std::string name;
  Rgb color;
  Marker marker = Marker::circle;
  LineStyle line = LineStyle::solid;
  std::vector<std::vector<PlotPoint>> strokes;  // each a polyline of 2 or more points
  std::vector<PlotPoint> markers;               // the drawable points inside the axes
};

struct LinePlot {
  LinePlotLayout layout;
  std::string title, x_label, y_label;
  std::vector<PlotLine> lines;  // in the order of the series
};

// Throws what line_plot_layout throws.
LinePlot make_line_plot(const std::vector<Series>& series, const LinePlotOptions& options);

}  // namespace qkv::viz
