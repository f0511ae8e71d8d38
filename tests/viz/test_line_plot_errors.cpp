#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/viz/line_plot.hpp"
#include "viz/scratch.hpp"

namespace qkv::viz {
namespace {

namespace fs = std::filesystem;

const std::vector<Series> kGood = {{"a", {1, 2, 3}, {1, 4, 9}}};

// The bad input throws qkv::Error naming `argument` from the layout and every writer, and no file
// is written.
void expect_rejected(const std::vector<Series>& series, const LinePlotOptions& options,
                     const std::string& argument) {
  try {
    line_plot_layout(series, options);
    ADD_FAILURE() << "line_plot_layout: no error for " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
  for (const char* name : {"bad_plot.png", "bad_plot.svg"}) {
    const fs::path path = testing::scratch(name);
    try {
      write_line_plot(series, options, path);
      ADD_FAILURE() << name << ": no error for " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
    EXPECT_FALSE(fs::exists(path)) << name << " written for bad " << argument;
  }
}

TEST(LinePlotErrors, BadSeries) {
  expect_rejected({}, {}, "series");
  expect_rejected({{"", {1}, {1}}}, {}, "series[0].name");
  expect_rejected({kGood[0], {"b", {1, 2}, {1}}}, {}, "series[1].y");
  expect_rejected({{"nan", {1, 2}, {NAN, NAN}}}, {}, "series");  // nothing to take limits from
  // Widened by 5%, the range passes the largest double.
  expect_rejected({{"huge", {0, 1.75e308}, {1, 2}}}, {}, "series");
  expect_rejected({{"huge", {1, 2}, {-1.7e308, 1.7e308}}}, {}, "series");
}

TEST(LinePlotErrors, LogAxisWithoutAPositiveValue) {
  LinePlotOptions options;
  options.log_y = true;
  expect_rejected({{"a", {1, 2, 3}, {0, -1, NAN}}}, options, "series");
  options = {};
  options.log_x = true;
  expect_rejected({{"a", {-1, 0}, {1, 2}}, {"b", {-INFINITY}, {1}}}, options, "series");
  // Positive x only where y is NaN: nothing is drawable.
  expect_rejected({{"a", {-1, 5}, {1, NAN}}}, options, "series");
}

TEST(LinePlotErrors, BadLimits) {
  LinePlotOptions options;
  options.x_min = NAN;
  expect_rejected(kGood, options, "options.x_min");
  options = {};
  options.y_max = INFINITY;
  expect_rejected(kGood, options, "options.y_max");
  options = {};
  options.log_y = true;
  options.y_min = 0.0;
  expect_rejected(kGood, options, "options.y_min");
  options = {};
  options.x_min = 2.0;
  options.x_max = 2.0;
  expect_rejected(kGood, options, "options.x_max");
  options = {};
  options.x_min = 100.0;  // above the data's upper limit
  expect_rejected(kGood, options, "options.x_min");
  // All four limits given: no point needs to be drawable.
  options = {};
  options.x_min = options.y_min = 0.0;
  options.x_max = options.y_max = 1.0;
  EXPECT_NO_THROW(line_plot_layout({{"nan", {NAN}, {NAN}}}, options));
}

TEST(LinePlotErrors, ImageTooLargeOrTooSmall) {
  LinePlotOptions options;
  options.width = 0;
  expect_rejected(kGood, options, "options.width");
  options.width = 20000;
  expect_rejected(kGood, options, "options.width");
  options = {};
  options.height = -5;
  expect_rejected(kGood, options, "options.height");
  options.width = 8192;
  options.height = 8193;  // 8192 x 8193 > 2^26 pixels
  expect_rejected(kGood, options, "options.height");
  options = {};
  options.width = 120;  // no room for the axes beside the legend
  expect_rejected(kGood, options, "options.width");
  options = {};
  options.title = std::string(100, 'x');  // 700 pixels of title
  expect_rejected(kGood, options, "options.width");
  std::vector<Series> many;
  for (int i = 0; i < 30; ++i) many.push_back({std::to_string(i), {1}, {1}});
  options = {};  // 30 legend rows do not fit in 480 pixels
  expect_rejected(many, options, "options.height");
}

TEST(LinePlotErrors, BadPath) {
  const fs::path path = testing::scratch("plot.jpg");
  try {
    write_line_plot(kGood, {}, path);
    ADD_FAILURE() << "no error for .jpg";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "path");
    EXPECT_NE(std::string(e.what()).find(".png or .svg"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_THROW(write_line_plot_png(kGood, {}, "/nonexistent-dir/x.png"), Error);
  EXPECT_THROW(write_line_plot_svg(kGood, {}, "/nonexistent-dir/x.svg"), Error);
}

}  // namespace
}  // namespace qkv::viz
