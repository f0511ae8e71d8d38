#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/tensor.hpp"
#include "qkv/viz/heatmap.hpp"
#include "viz/scratch.hpp"

namespace qkv::viz {
namespace {

namespace fs = std::filesystem;
using testing::scratch;

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream out;
  out << file.rdbuf();
  return out.str();
}

std::string hex(Rgb color) {
  char text[8];
  std::snprintf(text, sizeof text, "#%02x%02x%02x", color.r, color.g, color.b);
  return text;
}

// Whether every element opened is closed in order (<a/> closes itself; <?...?> is no element),
// and no '<' or '&' stands unescaped in text.
bool well_formed(const std::string& xml) {
  std::vector<std::string> open;
  std::size_t i = 0;
  while ((i = xml.find_first_of("<&", i)) != std::string::npos) {
    if (xml[i] == '&') {
      const std::size_t end = xml.find(';', i);
      const std::string entity = xml.substr(i, end == std::string::npos ? 0 : end - i + 1);
      if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" &&
          entity != "&apos;") {
        return false;
      }
      i = end;
      continue;
    }
    const std::size_t end = xml.find('>', i);
    if (end == std::string::npos) return false;
    const std::string tag = xml.substr(i + 1, end - i - 1);
    if (tag.find('<') != std::string::npos) return false;
    if (tag.front() == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return false;
      open.pop_back();
    } else if (tag.front() != '?' && tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
    i = end + 1;
  }
  return open.empty();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t i = text.find(what); i != std::string::npos; i = text.find(what, i + 1)) ++n;
  return n;
}

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
