#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "qkv/tensor.hpp"
#include "qkv/viz/heatmap.hpp"
#include "viz/scratch.hpp"
#include "viz/xml.hpp"

namespace qkv::viz {
namespace {

namespace fs = std::filesystem;
using testing::count;
using testing::hex;
using testing::read_text;
using testing::scratch;
using testing::well_formed;

TEST(HeatmapSvg, WellFormedWithOneRectPerCellAndEscapedLabels) {
  // [P=2, R=3, C=4]: 0 at [0, 0, 0], 1 at [1, 2, 3]
  Tensor weights = Tensor::full({2, 3, 4}, 0.5);
  weights.set({0, 0, 0}, 0.0);
  weights.set({1, 2, 3}, 1.0);
  HeatmapOptions options;
  options.x_labels = {"<b>&", "it's", "\"q\"", "plain"};
  options.y_labels = {"é", "bad\xff", "z"};
  options.title = "a & b";
  const fs::path path = scratch("escaped.svg");
  write_heatmap(weights, options, path);
  const std::string svg = read_text(path);
  ASSERT_TRUE(well_formed(svg)) << svg;
  const HeatmapLayout layout = heatmap_layout(3, 4, 2, options);
  EXPECT_NE(svg.find("width=\"" + std::to_string(layout.width) + "\" height=\"" +
                     std::to_string(layout.height) + "\""),
            std::string::npos);
  // Each panel is a <g class="panel"> whose rects are its cells; the color bar follows them.
  std::size_t at = 0;
  for (int p = 0; p < 2; ++p) {
    at = svg.find("<g class=\"panel\">", at);
    ASSERT_NE(at, std::string::npos);
    const std::size_t end =
        std::min(svg.find("<g class=\"panel\">", at + 1), svg.find("<g class=\"colorbar\">", at));
    EXPECT_EQ(count(svg.substr(at, end - at), "<rect "), 3 * 4) << "panel " << p;
    at = end;
  }
  EXPECT_EQ(count(svg, "fill=\"" + hex(viridis(1.0)) + "\""), 1);
  EXPECT_EQ(count(svg, "fill=\"" + hex(viridis(0.0)) + "\""), 1);
  EXPECT_EQ(count(svg, "fill=\"" + hex(viridis(0.5)) + "\""), 2 * 3 * 4 - 2);
  EXPECT_NE(svg.find("&lt;b&gt;&amp;"), std::string::npos);
  EXPECT_EQ(svg.find("<b>"), std::string::npos);
  EXPECT_NE(svg.find("it&apos;s"), std::string::npos);
  EXPECT_NE(svg.find("&quot;q&quot;"), std::string::npos);
  EXPECT_NE(svg.find(">a &amp; b<"), std::string::npos);
  EXPECT_NE(svg.find(">é<"), std::string::npos) << "UTF-8 passes through";
  EXPECT_NE(svg.find(">bad?<"), std::string::npos) << "malformed UTF-8 becomes '?'";
}

TEST(HeatmapSvg, DefaultTitlesAndIndexLabels) {
  const fs::path path = scratch("default.svg");
  write_heatmap_svg(Tensor::full({3, 2, 2}, 0.25, DType::bf16), {}, path);  // [P=3, R=2, C=2]
  const std::string svg = read_text(path);
  ASSERT_TRUE(well_formed(svg));
  for (const char* title : {">head 0<", ">head 1<", ">head 2<", ">0<", ">1<"}) {
    EXPECT_NE(svg.find(title), std::string::npos) << title;
  }
}

}  // namespace
}  // namespace qkv::viz
