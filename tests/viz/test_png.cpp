#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "qkv/error.hpp"
#include "qkv/tensor.hpp"
#include "qkv/viz/heatmap.hpp"
#include "viz/png_reader.hpp"
#include "viz/scratch.hpp"

namespace qkv::viz {
namespace {

namespace fs = std::filesystem;
using testing::has_png_signature;
using testing::read_png;
using testing::scratch;

// [P, R, C] weights i * 0.1 + j * 0.01 + p: distinct, the smallest 0 at [0, 0, 0], the largest
// at [P-1, R-1, C-1].
Tensor ramp(std::int64_t panels, std::int64_t rows, std::int64_t cols) {
  Tensor t = Tensor::empty({panels, rows, cols}, DType::f64);
  for (std::int64_t p = 0; p < panels; ++p) {
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < cols; ++j) t.set({p, i, j}, p + i * 0.1 + j * 0.01);
    }
  }
  return t;
}

// The color at the center of cell (r, c) of panel p.
Rgb cell_color(const testing::Picture& picture, const HeatmapLayout& layout, int p, int r, int c) {
  const int half = layout.cell_size / 2;
  return picture.at(layout.panel_x[p] + c * layout.cell_size + half,
                    layout.panel_y + r * layout.cell_size + half);
}

TEST(HeatmapPng, SizeAndExtremeColorsAsTheLayoutPredicts) {
  const HeatmapOptions options{{"a", "b", "c", "d"}, {"x", "y", "z"}, {}, "ramp", 0, 0.0};
  const Tensor weights = ramp(2, 3, 4);  // [P=2, R=3, C=4]
  const fs::path path = scratch("ramp.png");
  write_heatmap_png(weights, options, path);
  ASSERT_TRUE(has_png_signature(path));
  const testing::Picture picture = read_png(path);
  const HeatmapLayout layout = heatmap_layout(3, 4, 2, options);
  EXPECT_EQ(picture.width, layout.width);
  EXPECT_EQ(picture.height, layout.height);
  EXPECT_GE(layout.cell_size, 13) << "labels need a cell one text line high";
  EXPECT_EQ(cell_color(picture, layout, 0, 0, 0), viridis(0.0));
  EXPECT_EQ(cell_color(picture, layout, 1, 2, 3), viridis(1.0));
  EXPECT_EQ(viridis(1.0), (Rgb{253, 231, 37}));
  EXPECT_EQ(viridis(0.0), (Rgb{68, 1, 84}));
  // The color bar: the top color at the top, the bottom color at the bottom.
  const int bar_center = layout.colorbar_x + layout.colorbar_width / 2;
  EXPECT_EQ(picture.at(bar_center, layout.colorbar_y), viridis(1.0));
  EXPECT_EQ(picture.at(bar_center, layout.colorbar_y + layout.colorbar_height - 1), viridis(0.0));
}

TEST(HeatmapPng, AnyStridesAndDtypeDrawTheSamePicture) {
  const Tensor weights = ramp(1, 5, 6).to(DType::f32);  // [1, 5, 6]
  const Tensor strided = weights.transpose(1, 2).contiguous().transpose(1, 2);
  ASSERT_FALSE(strided.is_contiguous());
  const fs::path a = scratch("contiguous.png");
  const fs::path b = scratch("strided.png");
  write_heatmap_png(weights, {}, a);
  write_heatmap_png(strided.to(DType::f64), {}, b);
  EXPECT_EQ(read_png(a).rgb, read_png(b).rgb);
}

TEST(HeatmapPng, RankTwoIsOnePanelAndNanIsGray) {
  Tensor weights = Tensor::from_values({2, 2}, {0.0, NAN, 0.25, 1.0});  // [R=2, C=2]
  const fs::path path = scratch("nan.png");
  write_heatmap(weights, {}, path);
  const testing::Picture picture = read_png(path);
  const HeatmapLayout layout = heatmap_layout(2, 2, 1, {});
  ASSERT_EQ(picture.width, layout.width);
  ASSERT_EQ(layout.panel_x.size(), 1u);
  EXPECT_EQ(cell_color(picture, layout, 0, 0, 1), kNanColor);
  EXPECT_EQ(cell_color(picture, layout, 0, 1, 1), viridis(1.0));
}

TEST(HeatmapPng, VmaxAndNegativeWeightsSetTheScale) {
  const Tensor half = Tensor::full({1, 2}, 0.5);  // [R=1, C=2]
  HeatmapOptions options;
  options.vmax = 1.0;
  const fs::path path = scratch("vmax.png");
  write_heatmap_png(half, options, path);
  EXPECT_EQ(cell_color(read_png(path), heatmap_layout(1, 2, 1, options), 0, 0, 0), viridis(0.5));
  // vmin = min(0, smallest) = -1: the smallest weight takes the bottom color.
  const Tensor signed_weights = Tensor::from_values({1, 2}, {-1.0, 1.0});
  write_heatmap_png(signed_weights, {}, path);
  const testing::Picture picture = read_png(path);
  EXPECT_EQ(cell_color(picture, heatmap_layout(1, 2, 1, {}), 0, 0, 0), viridis(0.0));
  EXPECT_EQ(cell_color(picture, heatmap_layout(1, 2, 1, {}), 0, 0, 1), viridis(1.0));
}

TEST(HeatmapPng, LabelsAreDrawnInInk) {
  // Text is the only thing drawn left of a grid: some pixel there must be dark.
  HeatmapOptions options;
  options.y_labels = {"WWWW", "né"};  // non-ASCII draws as '?'
  const fs::path path = scratch("labels.png");
  write_heatmap_png(Tensor::full({2, 2}, 0.5), options, path);
  const testing::Picture picture = read_png(path);
  const HeatmapLayout layout = heatmap_layout(2, 2, 1, options);
  int darkest = 255;
  for (int y = layout.panel_y; y < layout.panel_y + 2 * layout.cell_size; ++y) {
    for (int x = 0; x < layout.panel_x[0]; ++x)
      darkest = std::min<int>(darkest, picture.at(x, y).g);
  }
  EXPECT_LT(darkest, 80);
}

TEST(HeatmapLayout, LargeUnlabeledGridsGetSmallCellsAndSparseLabels) {
  const HeatmapLayout layout = heatmap_layout(100, 100, 1, {});  // [R=100, C=100]
  EXPECT_EQ(layout.cell_size, 2);
  EXPECT_EQ(layout.y_label_step, 7) << "rows labeled a text line (13 px) apart";
  EXPECT_GE(layout.x_label_step * layout.cell_size, 13);
  HeatmapOptions options;
  options.cell_size = 1 << 20;
  EXPECT_THROW(heatmap_layout(100, 100, 1, options), Error);
}

}  // namespace
}  // namespace qkv::viz
