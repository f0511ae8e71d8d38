#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/viz/line_plot.hpp"
#include "viz/scratch.hpp"
#include "viz/xml.hpp"

namespace qkv::viz {
namespace {

using testing::count;
using testing::hex;
using testing::read_text;
using testing::scratch;
using testing::well_formed;

// The element of `svg` that holds `needle`, from its '<' to its '>'.
std::string element_with(const std::string& svg, const std::string& needle) {
  const std::size_t at = svg.find(needle);
  if (at == std::string::npos) return "";
  const std::size_t start = svg.rfind('<', at);
  return svg.substr(start, svg.find('>', at) - start + 1);
}

TEST(LinePlotSvg, OnePathPerSeriesAndTheLegendNamesEach) {
  const std::vector<Series> series = {
      {"full", {1024, 2048, 4096}, {10, 40, 160}},
      {"a <b> & \"c\"", {1024, 2048, 4096}, {5, NAN, 80}, Marker::triangle},
      {"~ T", {1024, 4096}, {10, 40}, Marker::none, LineStyle::dashed, Rgb{128, 128, 128}},
      {"lonely", {2048}, {20}, Marker::diamond}};
  LinePlotOptions options;
  options.log_x = options.log_y = true;
  options.title = "fwd";
  options.x_label = "T";
  options.y_label = "ms";
  const std::filesystem::path path = scratch("line.svg");
  write_line_plot(series, options, path);
  const std::string svg = read_text(path);
  ASSERT_TRUE(well_formed(svg)) << svg;
  const LinePlotLayout layout = line_plot_layout(series, options);
  EXPECT_NE(svg.find("width=\"" + std::to_string(layout.width) + "\" height=\"" +
                     std::to_string(layout.height) + "\""),
            std::string::npos);
  EXPECT_EQ(count(svg, "<path "), 4);
  EXPECT_EQ(count(svg, "<path class=\"series\""), 4);
  const Rgb colors[] = {kPalette[0], kPalette[1], Rgb{128, 128, 128}, kPalette[2]};
  for (int s = 0; s < 4; ++s) {
    EXPECT_GE(count(svg, "stroke=\"" + hex(colors[s]) + "\""), 2) << "path and legend of " << s;
  }
  // Series 1 breaks at its NaN: two pieces of one point each draw nothing, so its path is empty;
  // series 0 is one piece.
  const std::string full = element_with(svg, "stroke=\"" + hex(kPalette[0]) + "\"");
  EXPECT_EQ(count(full, "M"), 1) << full;
  EXPECT_EQ(count(full, "L"), 2) << full;
  const std::string broken = element_with(svg, "stroke=\"" + hex(kPalette[1]) + "\"");
  EXPECT_EQ(count(broken, "M"), 0) << broken;
  EXPECT_NE(element_with(svg, "stroke=\"#808080\"").find("stroke-dasharray"), std::string::npos);
  // Markers: 3 circles of series 0, 2 triangles of series 1 and one diamond, each plus its legend
  // row's (none for the reference line).
  EXPECT_EQ(count(svg, "<circle "), 3 + 1);
  EXPECT_EQ(count(svg, "<polygon "), 2 + 1 + 1 + 1);
  for (const char* name : {">full<", ">a &lt;b&gt; &amp; &quot;c&quot;<", ">~ T<", ">lonely<",
                           ">fwd<", ">T<", ">ms<"}) {
    EXPECT_NE(svg.find(name), std::string::npos) << name;
  }
}

TEST(LinePlotSvg, TickLabelsAreText) {
  LinePlotOptions options;
  options.x_min = options.y_min = 0.0;
  options.x_max = options.y_max = 1.0;
  const std::filesystem::path path = scratch("ticks.svg");
  write_line_plot_svg({{"s", {0.1, 0.9}, {0.1, 0.9}}}, options, path);
  const std::string svg = read_text(path);
  ASSERT_TRUE(well_formed(svg));
  for (const char* label : {">0<", ">0.2<", ">0.4<", ">0.6<", ">0.8<", ">1.0<"}) {
    EXPECT_EQ(count(svg, label), 2) << label << " on both axes";
  }
}

}  // namespace
}  // namespace qkv::viz
