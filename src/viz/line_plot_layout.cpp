#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/viz/line_plot.hpp"
#include "viz/font.hpp"
#include "viz/layout.hpp"
#include "viz/line_plot_figure.hpp"
#include "viz/text.hpp"
#include "viz/ticks.hpp"

namespace qkv::viz {
namespace {

constexpr int kMaxSide = 16384;
constexpr std::int64_t kMaxPixels = std::int64_t{1} << 26;  // as for heatmaps: 192 MiB of RGB
// Automatic limits leave this share of the data's span free at each end.
constexpr double kPad = 0.05;

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

// One axis's options, named for the messages.
struct AxisOptions {
  const char* name;  // "x", "y"
  bool log;
  std::optional<double> min, max;
};

void check_limit(const char* axis, const char* end, const std::optional<double>& limit, bool log) {
  if (!limit) return;
  const std::string argument = std::string("options.") + axis + "_" + end;
  if (!std::isfinite(*limit)) throw Error(argument, "a finite number", number(*limit));
  if (log && !(*limit > 0)) {
    throw Error(argument, std::string("> 0, as options.log_") + axis + " is set", number(*limit));
  }
}

void check_input(const std::vector<Series>& series, const LinePlotOptions& options) {
  if (series.empty()) throw Error("series", "at least one series", "none");
  for (std::size_t i = 0; i < series.size(); ++i) {
    const std::string at = "series[" + std::to_string(i) + "]";
    if (series[i].name.empty()) throw Error(at + ".name", "a name for the legend", "\"\"");
    if (series[i].y.size() != series[i].x.size()) {
      throw Error(at + ".y", std::to_string(series[i].x.size()) + " values, one per x",
                  std::to_string(series[i].y.size()));
    }
  }
  if (options.width < 1 || options.width > kMaxSide) {
    throw Error("options.width", "1 to 16384 pixels", std::to_string(options.width));
  }
  if (options.height < 1 || options.height > kMaxSide) {
    throw Error("options.height", "1 to 16384 pixels", std::to_string(options.height));
  }
  if (std::int64_t{options.width} * options.height > kMaxPixels) {
    throw Error("options.height",
                "at most " + std::to_string(kMaxPixels / options.width) +
                    " pixels: an image of at most 2^26 pixels, " + std::to_string(options.width) +
                    " wide",
                std::to_string(options.height));
  }
  check_limit("x", "min", options.x_min, options.log_x);
  check_limit("x", "max", options.x_max, options.log_x);
  check_limit("y", "min", options.y_min, options.log_y);
  check_limit("y", "max", options.y_max, options.log_y);
  for (const bool along_x : {true, false}) {
    if (!(along_x ? options.log_x : options.log_y)) continue;
    bool positive = false;
    for (const Series& s : series) {
      for (const double v : along_x ? s.x : s.y) positive |= std::isfinite(v) && v > 0;
    }
    const char* axis = along_x ? "x" : "y";
    if (!positive) {
      throw Error("series",
                  std::string("some finite ") + axis + " > 0, as options.log_" + axis + " is set",
                  "none");
    }
  }
}

// The limits of one axis: the given ones, or the drawable values' range widened (see
// LinePlotOptions).
void axis_limits(const std::vector<Series>& series, const LinePlotOptions& options,
                 const AxisOptions& axis, bool along_x, double& lo, double& hi) {
  lo = axis.min.value_or(0.0);
  hi = axis.max.value_or(0.0);
  if (!axis.min || !axis.max) {
    double low = std::numeric_limits<double>::infinity();
    double high = -low;
    for (const Series& s : series) {
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        if (!drawable(s.x[i], options.log_x) || !drawable(s.y[i], options.log_y)) continue;
        const double v = along_x ? s.x[i] : s.y[i];
        low = std::min(low, axis.log ? std::log10(v) : v);
        high = std::max(high, axis.log ? std::log10(v) : v);
      }
    }
    if (low > high) {
      throw Error("series",
                  std::string("a drawable point (finite x and y, > 0 on a log axis) or both ") +
                      "options." + axis.name + "_min and options." + axis.name + "_max",
                  "no drawable point");
    }
    const double pad = high > low ? kPad * (high - low)
                       : axis.log ? 0.5
                       : low != 0 ? 0.1 * std::abs(low)
                                  : 1.0;
    low -= pad;
    high += pad;
    if (!axis.min) lo = axis.log ? std::pow(10.0, low) : low;
    if (!axis.max) hi = axis.log ? std::pow(10.0, high) : high;
  }
  // Data near the largest double can widen past it, or span more than a double holds.
  if (!std::isfinite(lo) || !std::isfinite(hi) || !std::isfinite(hi - lo)) {
    throw Error("series",
                std::string(axis.name) + " values whose range, widened by 5%, is a finite double",
                number(lo) + " .. " + number(hi));
  }
  if (!(lo < hi)) {
    const bool blame_max = axis.max.has_value();
    throw Error(std::string("options.") + axis.name + (blame_max ? "_max" : "_min"),
                blame_max ? "more than the lower limit " + number(lo)
                          : "less than the upper limit " + number(hi),
                number(blame_max ? hi : lo));
  }
}

int widest_label(const std::vector<AxisTick>& ticks) {
  int width = 0;
  for (const AxisTick& tick : ticks) width = std::max(width, text_width(tick.label));
  return width;
}

// The columns from the first labeled x tick's label to the end of the last one's.
struct Span {
  int left = 0, right = 0;
  bool any = false;  // false when no tick is labeled
};
Span label_span(const std::vector<AxisTick>& ticks) {
  Span span;
  for (const AxisTick& tick : ticks) {
    if (tick.label.empty()) continue;
    const int left = tick.pixel - text_width(tick.label) / 2;
    if (!span.any) span.left = left;
    span.right = left + text_width(tick.label);
    span.any = true;
  }
  return span;
}

void too_small(const char* argument, int given, int needed, const std::string& what) {
  throw Error(argument, "at least " + std::to_string(needed) + " pixels, for " + what,
              std::to_string(given));
}

}  // namespace

double LinePlotLayout::pixel_x(double x) const {
  return AxisScale{x_min, x_max, log_x, double(axes.x), double(axes.x + axes.width - 1)}.pixel(x);
}

double LinePlotLayout::pixel_y(double y) const {
  return AxisScale{y_min, y_max, log_y, double(axes.y + axes.height - 1), double(axes.y)}.pixel(y);
}

LinePlotLayout line_plot_layout(const std::vector<Series>& series, const LinePlotOptions& options) {
  check_input(series, options);
  LinePlotLayout layout;
  layout.width = options.width;
  layout.height = options.height;
  layout.log_x = options.log_x;
  layout.log_y = options.log_y;
  axis_limits(series, options, {"x", options.log_x, options.x_min, options.x_max}, true,
              layout.x_min, layout.x_max);
  axis_limits(series, options, {"y", options.log_y, options.y_min, options.y_max}, false,
              layout.y_min, layout.y_max);
  constexpr int kH = font::kHeight;
  const int title_w = text_width(options.title);
  const int x_label_w = text_width(options.x_label);
  const int y_label_h = text_width(options.y_label);

  // Top to bottom: title, the axes (the top y label reaches half a line above them), x tick
  // marks and labels, x axis label.
  int top = kMargin;
  if (title_w > 0) top += kH + kTitleGap;
  const int axes_y = top + kH / 2;
  int bottom = options.height - kMargin;
  if (x_label_w > 0) bottom -= kH + kGap;
  const int x_labels_y = bottom - kH;
  const int axes_bottom = x_labels_y - kTextPad - kMajorTickLength;
  const int legend_h = 2 * kLegendPad + static_cast<int>(series.size()) * kLegendRowHeight;
  const int axes_h_needed = std::max({kMinAxesSize, legend_h, y_label_h});
  if (axes_bottom - axes_y < axes_h_needed) {
    too_small("options.height", options.height,
              options.height - (axes_bottom - axes_y) + axes_h_needed,
              "the title, the x labels and " +
                  (legend_h >= std::max(kMinAxesSize, y_label_h)
                       ? "a legend of " + std::to_string(series.size()) + " series"
                       : std::string("the y label")));
  }
  layout.axes.y = axes_y;
  layout.axes.height = axes_bottom - axes_y;
  layout.y_ticks = choose_ticks(
      {layout.y_min, layout.y_max, options.log_y, double(axes_bottom - 1), double(axes_y)}, false);

  // Left to right: y axis label, y tick labels and marks, the axes, the legend.
  int left = kMargin;
  if (y_label_h > 0) left += kH + kGap;
  const int axes_left = left + widest_label(layout.y_ticks) + kTextPad + kMajorTickLength;
  int widest_name = 0;
  for (const Series& s : series) widest_name = std::max(widest_name, text_width(s.name));
  const int legend_w = 2 * kLegendPad + kSampleLength + kGap + widest_name;
  const int legend_x = options.width - kMargin - legend_w;
  // The outer x labels may stick out of the axes by half their width: where that would leave
  // the image, the axes shrink, and after a few tries the labels that still do are dropped.
  int shift_left = 0;
  int shift_right = 0;
  for (int attempt = 0;; ++attempt) {
    layout.axes.x = axes_left + shift_left;
    layout.axes.width = legend_x - kLegendGap - shift_right - layout.axes.x;
    const int needed = std::max({options.width - layout.axes.width + kMinAxesSize,
                                 title_w + 2 * kMargin, x_label_w + 2 * kMargin});
    if (options.width < needed) {
      too_small("options.width", options.width, needed,
                "the y labels, a legend of names up to " + std::to_string(widest_name) +
                    " pixels wide, the title and the x label");
    }
    layout.x_ticks = choose_ticks({layout.x_min, layout.x_max, options.log_x, double(layout.axes.x),
                                   double(layout.axes.x + layout.axes.width - 1)},
                                  true);
    const Span span = label_span(layout.x_ticks);
    const int over_left = span.any ? std::max(0, kMargin - span.left) : 0;
    const int over_right = span.any ? std::max(0, span.right - (options.width - kMargin)) : 0;
    if (over_left == 0 && over_right == 0) break;
    if (attempt == 3) {
      for (AxisTick& tick : layout.x_ticks) {
        const int l = tick.pixel - text_width(tick.label) / 2;
        if (l < kMargin || l + text_width(tick.label) > options.width - kMargin) tick.label.clear();
      }
      break;
    }
    shift_left += over_left;
    shift_right += over_right;
  }

  const PixelRect& axes = layout.axes;
  for (AxisTick& tick : layout.x_ticks) {
    if (tick.label.empty()) continue;
    const int w = text_width(tick.label);
    tick.label_box = {tick.pixel - w / 2, x_labels_y, w, kH};
  }
  for (AxisTick& tick : layout.y_ticks) {
    if (tick.label.empty()) continue;
    const int w = text_width(tick.label);
    tick.label_box = {axes.x - kMajorTickLength - kTextPad - w, tick.pixel - kH / 2, w, kH};
  }
  // Titles are centered on the axes, as far as the image allows.
  const auto centered = [&](int w) {
    return std::clamp(axes.x + (axes.width - w) / 2, kMargin, options.width - kMargin - w);
  };
  if (title_w > 0) layout.title = {centered(title_w), kMargin, title_w, kH};
  if (x_label_w > 0) {
    layout.x_label = {centered(x_label_w), options.height - kMargin - kH, x_label_w, kH};
  }
  if (y_label_h > 0) {
    layout.y_label = {kMargin, axes.y + (axes.height - y_label_h) / 2, kH, y_label_h};
  }
  layout.legend = {legend_x, axes.y, legend_w, legend_h};
  for (std::size_t i = 0; i < series.size(); ++i) {
    layout.legend_rows.push_back({legend_x + kLegendPad,
                                  axes.y + kLegendPad + static_cast<int>(i) * kLegendRowHeight,
                                  legend_w - 2 * kLegendPad, kLegendRowHeight});
  }
  return layout;
}

}  // namespace qkv::viz
