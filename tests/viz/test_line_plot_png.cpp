#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/viz/line_plot.hpp"
#include "viz/png_reader.hpp"
#include "viz/scratch.hpp"

namespace qkv::viz {
namespace {

namespace fs = std::filesystem;
using testing::Picture;
using testing::read_png;
using testing::scratch;

constexpr Rgb kWhite{255, 255, 255};

// The pixel a data point falls on.
Rgb at(const Picture& picture, const LinePlotLayout& layout, double x, double y) {
  return picture.at(static_cast<int>(std::lround(layout.pixel_x(x))),
                    static_cast<int>(std::lround(layout.pixel_y(y))));
}

bool is_tick_column(const LinePlotLayout& layout, int x) {
  for (const AxisTick& tick : layout.x_ticks) {
    if (tick.pixel == x) return true;
  }
  return false;
}

bool is_tick_row(const LinePlotLayout& layout, int y) {
  for (const AxisTick& tick : layout.y_ticks) {
    if (tick.pixel == y) return true;
  }
  return false;
}

// Pixels of the series' color on the way from data point (x0, y0) to (x1, y1), column by column:
// in each column, the pixel nearest the line's center.
int colored_along(const Picture& picture, const LinePlotLayout& layout, double x0, double y0,
                  double x1, double y1, Rgb color, int& columns) {
  const double px0 = layout.pixel_x(x0), py0 = layout.pixel_y(y0);
  const double px1 = layout.pixel_x(x1), py1 = layout.pixel_y(y1);
  int hits = 0;
  columns = 0;
  for (int x = static_cast<int>(std::ceil(px0)); x <= static_cast<int>(std::floor(px1)); ++x) {
    const double y = py0 + (x - px0) / (px1 - px0) * (py1 - py0);
    hits += picture.at(x, static_cast<int>(std::lround(y))) == color ? 1 : 0;
    ++columns;
  }
  return hits;
}

TEST(LinePlotPng, PointsAndTheLinesBetweenThemTakeTheSeriesColor) {
  // Two gently sloped series far apart, so neither crosses the other.
  const std::vector<Series> series = {{"up", {0, 1, 2, 3}, {0, 1, 1.5, 3}},
                                      {"down", {0, 1.5, 3}, {10, 9, 8}, Marker::square}};
  LinePlotOptions options;
  options.title = "known points";
  const fs::path path = scratch("line_points.png");
  write_line_plot_png(series, options, path);
  const Picture picture = read_png(path);
  const LinePlotLayout layout = line_plot_layout(series, options);
  ASSERT_EQ(picture.width, layout.width);
  ASSERT_EQ(picture.height, layout.height);
  for (std::size_t s = 0; s < series.size(); ++s) {
    const Rgb color = kPalette[s];
    for (std::size_t i = 0; i < series[s].x.size(); ++i) {
      EXPECT_EQ(at(picture, layout, series[s].x[i], series[s].y[i]), color)
          << series[s].name << " point " << i;
    }
    for (std::size_t i = 0; i + 1 < series[s].x.size(); ++i) {
      int columns = 0;
      const int hits = colored_along(picture, layout, series[s].x[i], series[s].y[i],
                                     series[s].x[i + 1], series[s].y[i + 1], color, columns);
      EXPECT_GT(columns, 20);
      EXPECT_EQ(hits, columns) << series[s].name << " segment " << i << " is not continuous";
    }
  }
  // Background: white wherever nothing is drawn (a corner of the image; inside the axes, away from
  // the lines and the grid).
  EXPECT_EQ(picture.at(1, 1), kWhite);
  EXPECT_EQ(picture.at(layout.width - 2, layout.height - 2), kWhite);
  int checked = 0;
  for (const double y : {4.37, 5.37, 6.37}) {
    for (const double x : {0.37, 1.37, 2.37}) {
      const int px = static_cast<int>(std::lround(layout.pixel_x(x)));
      const int py = static_cast<int>(std::lround(layout.pixel_y(y)));
      if (is_tick_column(layout, px) || is_tick_row(layout, py)) continue;
      EXPECT_EQ(picture.at(px, py), kWhite) << "at (" << x << ", " << y << ")";
      ++checked;
    }
  }
  EXPECT_GT(checked, 3);
  // The legend's sample line in each series' color.
  for (std::size_t s = 0; s < series.size(); ++s) {
    const PixelRect& row = layout.legend_rows[s];
    EXPECT_EQ(picture.at(row.x + 1, row.y + row.height / 2), kPalette[s]) << "legend row " << s;
  }
}

TEST(LinePlotPng, SkippedPointsBreakTheLine) {
  // The middle point is NaN in one series and 0 (not drawable on the log y axis) in the other:
  // neither joins its first and last points.
  const std::vector<Series> series = {{"nan", {1, 2, 3}, {10, NAN, 10}},
                                      {"zero", {1, 2, 3}, {100, 0, 100}},
                                      {"whole", {1, 3}, {1000, 1000}}};
  LinePlotOptions options;
  options.log_y = true;
  const fs::path path = scratch("line_breaks.png");
  write_line_plot(series, options, path);
  const Picture picture = read_png(path);
  const LinePlotLayout layout = line_plot_layout(series, options);
  for (std::size_t s = 0; s < series.size(); ++s) {
    const double y = series[s].y[0];
    EXPECT_EQ(at(picture, layout, 1, y), kPalette[s]) << series[s].name;
    EXPECT_EQ(at(picture, layout, 3, y), kPalette[s]) << series[s].name;
    int columns = 0;
    const int hits = colored_along(picture, layout, 1.2, y, 2.8, y, kPalette[s], columns);
    if (series[s].name == "whole") {
      EXPECT_EQ(hits, columns);
    } else {
      EXPECT_EQ(hits, 0) << series[s].name << " joined across a skipped point";
    }
  }
}

TEST(LinePlotPng, DashesGapsOwnColorsAndClipping) {
  // A dashed line shows gaps; a series with its own color does not use up a palette color; a line
  // running past explicit limits stops at the frame.
  const std::vector<Series> series = {
      {"dashed", {0, 10}, {1, 1}, Marker::none, LineStyle::dashed},
      {"gray", {0, 10}, {2, 2}, Marker::none, LineStyle::solid, Rgb{90, 90, 90}},
      {"past", {0, 20}, {3, 3}, Marker::diamond}};
  LinePlotOptions options;
  options.x_min = 0.0;
  options.x_max = 10.0;
  options.y_min = 0.0;
  options.y_max = 4.0;
  const fs::path path = scratch("line_styles.png");
  write_line_plot_png(series, options, path);
  const Picture picture = read_png(path);
  const LinePlotLayout layout = line_plot_layout(series, options);
  int columns = 0;
  const int dashed = colored_along(picture, layout, 0.5, 1, 9.5, 1, kPalette[0], columns);
  EXPECT_GT(dashed, columns / 2) << "dashes: 6 pixels on, 4 off";
  EXPECT_LT(dashed, columns * 3 / 4);
  EXPECT_EQ(colored_along(picture, layout, 0.5, 2, 9.5, 2, Rgb{90, 90, 90}, columns), columns);
  EXPECT_EQ(colored_along(picture, layout, 0.5, 3, 9.5, 3, kPalette[1], columns), columns)
      << "the third series takes the second palette color";
  const int right = layout.axes.x + layout.axes.width;
  const int row = static_cast<int>(std::lround(layout.pixel_y(3)));
  for (int x = right; x < layout.legend.x; ++x) {
    EXPECT_EQ(picture.at(x, row), kWhite) << "column " << x << " right of the axes";
  }
}

}  // namespace
}  // namespace qkv::viz
