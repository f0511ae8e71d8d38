#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "qkv/viz/color.hpp"

namespace qkv::viz {

// Line plots (target qkv::viz): series of (x, y) points joined by lines, with a marker at each
// point, on linear or log axes, a legend box right of the axes naming every series, as PNG or SVG.
// Made for measurements: time against sequence length on log-log axes, a score against a length
// bucket on linear ones.
//
// Skipped points: a point whose x or y is not finite, or is <= 0 on a log axis, gets no marker and
// breaks the line (the points before and after it are not joined). Points are joined in the order
// given. Parts of lines outside the axis limits are clipped.

enum class Marker : std::uint8_t { none, circle, square, triangle, diamond };
enum class LineStyle : std::uint8_t { solid, dashed, dotted };

struct Series {
  std::string name;       // in the legend; not empty
  std::vector<double> x;  // [N]
  std::vector<double> y;  // [N]
  Marker marker = Marker::circle;
  LineStyle line = LineStyle::solid;
  std::optional<Rgb> color = std::nullopt;  // empty: the next color of kPalette
};

// The colors of series that bring none, in order: the k-th such series takes kPalette[k % 10].
// Tableau 10 (matplotlib's tab10), its gray moved last, so that gray reference lines stay apart
// from the first nine series.
inline constexpr std::array<Rgb, 10> kPalette = {{{31, 119, 180},
                                                  {255, 127, 14},
                                                  {44, 160, 44},
                                                  {214, 39, 40},
                                                  {148, 103, 189},
                                                  {140, 86, 75},
                                                  {227, 119, 194},
                                                  {188, 189, 34},
                                                  {23, 190, 207},
                                                  {127, 127, 127}}};

struct LinePlotOptions {
  std::string title;    // above the axes; may be empty
  std::string x_label;  // below the x axis; may be empty
  std::string y_label;  // left of the y axis, reading upwards; may be empty
  bool log_x = false;
  bool log_y = false;
  // Axis limits. An empty one comes from the drawable points: their range widened by 5% of it
  // at each end (of its logarithm on a log axis), so no marker sits on the frame; a range of one
  // value is widened to +-10% of it (+-1 around 0), or half a decade each way on a log axis.
  std::optional<double> x_min, x_max, y_min, y_max;
  int width = 640;  // of the whole image, in pixels
  int height = 480;
};

// Pixels of a rectangle: columns [x, x + width), rows [y, y + height).
struct PixelRect {
  int x = 0, y = 0, width = 0, height = 0;
};

struct AxisTick {
  double value = 0.0;
  int pixel = 0;        // the column (x axis) or row (y axis) it marks
  bool major = true;    // major ticks are longer and have a dark grid line; minor ones (the 2
                        // and 5 between the decades of a log axis spanning two or more) are
                        // short, with a faint grid line, and never labeled
  std::string label;    // empty when not labeled (labels are thinned so that they never overlap)
  PixelRect label_box;  // where the label's text goes; empty when not labeled
};

// Where everything goes, in pixels from the top-left corner; PNG and SVG share it.
struct LinePlotLayout {
  int width = 0;  // of the whole image
  int height = 0;
  PixelRect axes;  // the frame is its outermost pixels; the data limits map onto the frame
  double x_min = 0.0, x_max = 1.0, y_min = 0.0, y_max = 1.0;  // the limits in data units
  bool log_x = false, log_y = false;
  std::vector<AxisTick> x_ticks;  // increasing value, left to right
  std::vector<AxisTick> y_ticks;  // increasing value, bottom to top
  PixelRect title;                // text boxes, width 0 where the text is empty; y_label reads
  PixelRect x_label;              // upwards, so its box is one text line wide and as tall as the
  PixelRect y_label;              // text is long
  PixelRect legend;               // the legend's frame
  std::vector<PixelRect> legend_rows;  // one per series: its line and marker, then its name

  // A data value's pixel coordinate, where n is the center of column (row) n: x_min is axes.x,
  // x_max the frame's last column; y_min its last row, y_max axes.y. Log axes map log10 of it.
  double pixel_x(double x) const;
  double pixel_y(double y) const;
};

// The layout of a plot of `series`. Throws qkv::Error naming the argument (series, series[i].name,
// series[i].y, options.*) for: no series, a series without a name, x and y of different sizes, a
// log axis where no point has a positive value there, no drawable point to take a missing limit
// from, limits that are not finite, not increasing or not positive on a log axis, an image too
// small for its labels and legend, or of more than 16384 pixels a side or 2^26 in all.
LinePlotLayout line_plot_layout(const std::vector<Series>& series, const LinePlotOptions& options);

// Each throws what line_plot_layout throws, and qkv::Error naming "path" when the file cannot be
// written; nothing is written on error.
void write_line_plot_png(const std::vector<Series>& series, const LinePlotOptions& options,
                         const std::filesystem::path& path);
void write_line_plot_svg(const std::vector<Series>& series, const LinePlotOptions& options,
                         const std::filesystem::path& path);
// Picks PNG or SVG from the extension (.png / .svg, any case), else qkv::Error naming "path".
void write_line_plot(const std::vector<Series>& series, const LinePlotOptions& options,
                     const std::filesystem::path& path);

}  // namespace qkv::viz
