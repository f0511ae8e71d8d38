#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "qkv/viz/line_plot.hpp"
#include "viz/ticks.hpp"

namespace qkv::viz {
namespace {

std::string describe(const PixelRect& r) {
  return "{" + std::to_string(r.x) + ", " + std::to_string(r.y) + ", " + std::to_string(r.width) +
         " x " + std::to_string(r.height) + "}";
}

bool overlap(const PixelRect& a, const PixelRect& b) {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

bool inside(const PixelRect& inner, const PixelRect& outer) {
  return inner.x >= outer.x && inner.y >= outer.y &&
         inner.x + inner.width <= outer.x + outer.width &&
         inner.y + inner.height <= outer.y + outer.height;
}

// The value's pixel, written out from the definition (not through AxisScale): linear or log10
// interpolation between the limits' pixels.
double expected_pixel(double value, double min, double max, bool log, double first, double last) {
  const double t = log ? (std::log10(value) - std::log10(min)) / (std::log10(max) - std::log10(min))
                       : (value - min) / (max - min);
  return first + t * (last - first);
}

// Everything the layout promises, whatever the input.
void expect_invariants(const LinePlotLayout& layout, std::size_t series) {
  const PixelRect image{0, 0, layout.width, layout.height};
  const PixelRect& axes = layout.axes;
  const int right = axes.x + axes.width - 1;
  const int bottom = axes.y + axes.height - 1;
  EXPECT_TRUE(inside(axes, image)) << describe(axes);
  EXPECT_GE(axes.width, 32);
  EXPECT_GE(axes.height, 32);
  EXPECT_DOUBLE_EQ(layout.pixel_x(layout.x_min), axes.x);
  EXPECT_DOUBLE_EQ(layout.pixel_x(layout.x_max), right);
  EXPECT_DOUBLE_EQ(layout.pixel_y(layout.y_min), bottom);
  EXPECT_DOUBLE_EQ(layout.pixel_y(layout.y_max), axes.y);

  std::vector<PixelRect> texts;  // every text box: none may overlap another or the axes
  for (const bool along_x : {true, false}) {
    const std::vector<AxisTick>& ticks = along_x ? layout.x_ticks : layout.y_ticks;
    const double min = along_x ? layout.x_min : layout.y_min;
    const double max = along_x ? layout.x_max : layout.y_max;
    const bool log = along_x ? layout.log_x : layout.log_y;
    int labeled = 0;
    for (std::size_t i = 0; i < ticks.size(); ++i) {
      const AxisTick& tick = ticks[i];
      SCOPED_TRACE((along_x ? "x tick " : "y tick ") + std::to_string(tick.value));
      EXPECT_GE(tick.value, min * (1 - 1e-9));
      EXPECT_LE(tick.value, max * (1 + 1e-9));
      if (i > 0) {
        EXPECT_GT(tick.value, ticks[i - 1].value);
        if (along_x) {
          EXPECT_GE(tick.pixel, ticks[i - 1].pixel);
        } else {
          EXPECT_LE(tick.pixel, ticks[i - 1].pixel) << "y grows upwards";
        }
      }
      const double want = along_x ? expected_pixel(tick.value, min, max, log, axes.x, right)
                                  : expected_pixel(tick.value, min, max, log, bottom, axes.y);
      EXPECT_NEAR(tick.pixel, want, 0.5);
      EXPECT_GE(tick.pixel, along_x ? axes.x : axes.y);
      EXPECT_LE(tick.pixel, along_x ? right : bottom);
      if (!tick.major) {
        EXPECT_TRUE(tick.label.empty());
      }
      if (tick.label.empty()) continue;
      ++labeled;
      texts.push_back(tick.label_box);
      EXPECT_EQ(tick.label_box.width, 7 * static_cast<int>(tick.label.size())) << tick.label;
      EXPECT_EQ(tick.label_box.height, 13);
      if (along_x) {
        EXPECT_GT(tick.label_box.y, bottom) << "below the axes";
        EXPECT_NEAR(tick.label_box.x + tick.label_box.width / 2.0, tick.pixel, 1.0);
      } else {
        EXPECT_LT(tick.label_box.x + tick.label_box.width, axes.x) << "left of the axes";
        EXPECT_NEAR(tick.label_box.y + tick.label_box.height / 2.0, tick.pixel, 1.0);
      }
    }
    EXPECT_GE(labeled, 1) << (along_x ? "x" : "y") << " axis without a number";
  }
  for (const PixelRect* box : {&layout.title, &layout.x_label, &layout.y_label}) {
    if (box->width > 0) texts.push_back(*box);
  }
  EXPECT_TRUE(inside(layout.legend, image)) << describe(layout.legend);
  EXPECT_FALSE(overlap(layout.legend, axes));
  EXPECT_EQ(layout.legend_rows.size(), series);
  for (std::size_t i = 0; i < layout.legend_rows.size(); ++i) {
    EXPECT_TRUE(inside(layout.legend_rows[i], layout.legend)) << "legend row " << i;
    if (i > 0) {
      EXPECT_FALSE(overlap(layout.legend_rows[i - 1], layout.legend_rows[i]));
    }
  }
  for (std::size_t i = 0; i < texts.size(); ++i) {
    EXPECT_TRUE(inside(texts[i], image)) << describe(texts[i]);
    EXPECT_FALSE(overlap(texts[i], axes)) << describe(texts[i]);
    EXPECT_FALSE(overlap(texts[i], layout.legend)) << describe(texts[i]);
    for (std::size_t j = 0; j < i; ++j) {
      EXPECT_FALSE(overlap(texts[i], texts[j])) << describe(texts[i]) << describe(texts[j]);
    }
  }
}

std::vector<double> values(const std::vector<AxisTick>& ticks, bool major) {
  std::vector<double> out;
  for (const AxisTick& tick : ticks) {
    if (tick.major == major) out.push_back(tick.value);
  }
  return out;
}

std::vector<std::string> labels(const std::vector<AxisTick>& ticks) {
  std::vector<std::string> out;
  for (const AxisTick& tick : ticks) {
    if (!tick.label.empty()) out.push_back(tick.label);
  }
  return out;
}

void expect_values(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * want.back());
}

TEST(LinePlotLayout, InvariantsHoldAcrossShapesScalesAndLabels) {
  const std::vector<double> t = {1024, 2048, 4096, 8192, 16384};
  struct Case {
    std::vector<Series> series;
    LinePlotOptions options;
  };
  std::vector<Case> cases;
  LinePlotOptions log_log;
  log_log.log_x = log_log.log_y = true;
  log_log.title = "time against T";
  log_log.x_label = "T";
  log_log.y_label = "median ms";
  std::vector<Series> variants;
  for (int v = 0; v < 10; ++v) {
    Series s{"variant " + std::to_string(v), t, {}};
    for (const double x : t) s.y.push_back((v + 1) * 1e-3 * x * x / 1024);
    variants.push_back(s);
  }
  cases.push_back({variants, log_log});
  LinePlotOptions small = log_log;
  small.width = 320;
  small.height = 260;
  cases.push_back({{variants[0], variants[9]}, small});
  LinePlotOptions linear;
  linear.x_label = "source length bucket";
  linear.y_label = "BLEU";
  cases.push_back({{{"BLEU", {5, 10, 15, 20, 25}, {0.91, 0.83, 0.7, 0.52, 0.4}},
                    {"exact match", {5, 10, 15, 20, 25}, {0.7, 0.5, NAN, 0.2, 0.05}}},
                   linear});
  // Long numbers on a short axis: labels must be thinned, not overlapped.
  LinePlotOptions narrow;
  narrow.width = 200;
  narrow.height = 120;
  cases.push_back({{{"a", {1000000.0, 1000000.25}, {-1e-7, 3e-7}}}, narrow});
  // Twelve decades on each axis; a negative y range.
  LinePlotOptions wide = log_log;
  wide.log_y = false;
  cases.push_back({{{"wide", {1e-6, 1, 1e6}, {-300, -20, -1}}}, wide});
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const LinePlotLayout layout = line_plot_layout(cases[i].series, cases[i].options);
    EXPECT_EQ(layout.width, cases[i].options.width);
    EXPECT_EQ(layout.height, cases[i].options.height);
    expect_invariants(layout, cases[i].series.size());
  }
}

TEST(LinePlotLayout, LinearZeroToOneStepsByTwoTenths) {
  LinePlotOptions options;
  options.x_min = options.y_min = 0.0;
  options.x_max = options.y_max = 1.0;
  const LinePlotLayout layout = line_plot_layout({{"s", {0.5}, {0.5}}}, options);
  for (const auto* ticks : {&layout.x_ticks, &layout.y_ticks}) {
    expect_values(values(*ticks, true), {0, 0.2, 0.4, 0.6, 0.8, 1.0});
    EXPECT_TRUE(values(*ticks, false).empty());
    EXPECT_EQ(labels(*ticks), (std::vector<std::string>{"0", "0.2", "0.4", "0.6", "0.8", "1.0"}));
  }
  expect_invariants(layout, 1);
}

TEST(LinePlotLayout, LogThousandTo65536HasTwoDecadesAndMinorTwosAndFives) {
  LinePlotOptions options;
  options.log_x = true;
  options.x_min = 1000.0;
  options.x_max = 65536.0;
  const LinePlotLayout layout = line_plot_layout({{"s", {4096}, {1}}}, options);
  expect_values(values(layout.x_ticks, true), {1e3, 1e4});
  expect_values(values(layout.x_ticks, false), {2e3, 5e3, 2e4, 5e4});
  EXPECT_EQ(labels(layout.x_ticks), (std::vector<std::string>{"1000", "10000"}));
  expect_invariants(layout, 1);
}

TEST(LinePlotLayout, ManyDecadesOnAShortAxisLabelEveryFewDecades) {
  LinePlotOptions options;
  options.log_y = true;
  options.height = 200;  // about 140 pixels for 25 decades
  options.y_min = 1e-12;
  options.y_max = 1e12;
  const LinePlotLayout layout = line_plot_layout({{"s", {1}, {1}}}, options);
  std::vector<double> decades;
  for (int k = -12; k <= 12; ++k) decades.push_back(std::pow(10.0, k));
  ASSERT_EQ(values(layout.y_ticks, true).size(), decades.size());
  for (std::size_t i = 0; i < decades.size(); ++i) {
    EXPECT_NEAR(values(layout.y_ticks, true)[i], decades[i], 1e-9 * decades[i]);
  }
  EXPECT_TRUE(values(layout.y_ticks, false).empty()) << "no room for minor ticks";
  const std::vector<std::string> shown = labels(layout.y_ticks);
  EXPECT_GE(shown.size(), 2u);
  EXPECT_LT(shown.size(), decades.size());
  EXPECT_NE(std::find(shown.begin(), shown.end(), "1"), shown.end()) << "10^0 is a multiple";
  expect_invariants(layout, 1);
}

TEST(LinePlotLayout, LogAxesWithinADecadeUseOneTwoFiveOrLinearSteps) {
  LinePlotOptions options;
  options.log_x = true;
  options.x_min = 20.0;
  options.x_max = 300.0;
  options.log_y = true;
  options.y_min = 3.0;
  options.y_max = 8.0;
  const LinePlotLayout layout = line_plot_layout({{"s", {50}, {5}}}, options);
  expect_values(values(layout.x_ticks, true), {20, 50, 100, 200});
  EXPECT_EQ(labels(layout.x_ticks), (std::vector<std::string>{"20", "50", "100", "200"}));
  // 3..8 holds only 5 of 1, 2, 5 x 10^k: linear steps instead.
  const std::vector<double> y = values(layout.y_ticks, true);
  ASSERT_GE(y.size(), 2u);
  for (const double v : y) EXPECT_DOUBLE_EQ(v, std::round(v)) << "steps of 1";
  expect_invariants(layout, 1);
}

TEST(LinePlotLayout, AutomaticLimitsPadTheDataByFivePercent) {
  const std::vector<Series> series = {{"a", {0, 10}, {1, 100}},
                                      {"b", {5, NAN, 1e9}, {50, 1e9, NAN}}};  // no drawable extra
  LinePlotOptions options;
  options.log_y = true;
  const LinePlotLayout layout = line_plot_layout(series, options);
  EXPECT_DOUBLE_EQ(layout.x_min, -0.5);
  EXPECT_DOUBLE_EQ(layout.x_max, 10.5);
  EXPECT_NEAR(std::log10(layout.y_min), -0.1, 1e-12);
  EXPECT_NEAR(std::log10(layout.y_max), 2.1, 1e-12);
  // One value: +-10% of it, or half a decade on a log axis; a given limit is kept as is.
  options.y_min = 0.5;
  const LinePlotLayout one = line_plot_layout({{"c", {4, 4}, {3, 3}}}, options);
  EXPECT_DOUBLE_EQ(one.x_min, 3.6);
  EXPECT_DOUBLE_EQ(one.x_max, 4.4);
  EXPECT_DOUBLE_EQ(one.y_min, 0.5);
  EXPECT_NEAR(std::log10(one.y_max), std::log10(3) + 0.5, 1e-12);
  const LinePlotLayout zero = line_plot_layout({{"z", {0}, {1}}}, {});
  EXPECT_DOUBLE_EQ(zero.x_min, -1.0);
  EXPECT_DOUBLE_EQ(zero.x_max, 1.0);
}

TEST(LinePlotLayout, TickLabelsHaveTheDigitsOfTheStep) {
  EXPECT_EQ(tick_label(0.0, -3), "0");
  EXPECT_EQ(tick_label(0.25, -2), "0.25");
  EXPECT_EQ(tick_label(0.30000000000000004, -1), "0.3");
  EXPECT_EQ(tick_label(1.0, -1), "1.0");
  EXPECT_EQ(tick_label(1500, 2), "1500");
  EXPECT_EQ(tick_label(-40, 1), "-40");
  EXPECT_EQ(tick_label(10000, 4), "10000");
  EXPECT_EQ(tick_label(100000, 5), "1e5");
  EXPECT_EQ(tick_label(2.5e6, 5), "2.5e6");
  EXPECT_EQ(tick_label(1e-5, -5), "1e-5");
  EXPECT_EQ(tick_label(-2e-7, -7), "-2e-7");
  EXPECT_EQ(tick_label(1.0001e6, 2), "1000100");
}

TEST(LinePlotLayout, ValuesAtTheResolutionOfADoubleStillGetTheirTicks) {
  // Doubles near 2^60 are 256 apart: a step of 100 is no step there, and n + 1 == n for its
  // multiples (about 1.2e16); the ticks still come in order.
  const LinePlotLayout layout =
      line_plot_layout({{"far", {0x1p60, 0x1p60 + 256, 0x1p60 + 512}, {1, 2, 3}}}, {});
  expect_invariants(layout, 1);
}

TEST(LinePlotLayout, PixelsFollowTheScale) {
  LinePlotOptions options;
  options.log_x = true;
  options.x_min = 10.0;
  options.x_max = 1000.0;
  options.y_min = -1.0;
  options.y_max = 3.0;
  const LinePlotLayout layout = line_plot_layout({{"s", {100}, {1}}}, options);
  const PixelRect& a = layout.axes;
  EXPECT_DOUBLE_EQ(layout.pixel_x(100), a.x + (a.width - 1) / 2.0) << "the middle decade";
  EXPECT_DOUBLE_EQ(layout.pixel_y(1), a.y + (a.height - 1) / 2.0);
  EXPECT_DOUBLE_EQ(layout.pixel_y(0), a.y + 0.75 * (a.height - 1));
}

}  // namespace
}  // namespace qkv::viz
