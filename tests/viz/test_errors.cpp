#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>

#include "qkv/error.hpp"
#include "qkv/tensor.hpp"
#include "qkv/viz/heatmap.hpp"
#include "viz/scratch.hpp"

namespace qkv::viz {
namespace {

namespace fs = std::filesystem;

// Each bad input throws qkv::Error naming `argument` from every writer, and writes no file.
void expect_rejected(const Tensor& weights, const HeatmapOptions& options,
                     const std::string& argument) {
  for (const char* name : {"bad.png", "bad.svg"}) {
    const fs::path path = testing::scratch(name);
    try {
      write_heatmap(weights, options, path);
      ADD_FAILURE() << name << ": no error for " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
    EXPECT_FALSE(fs::exists(path)) << name << " written for bad " << argument;
  }
}

TEST(HeatmapErrors, BadWeights) {
  expect_rejected(Tensor(), {}, "weights");
  expect_rejected(Tensor::zeros({4}), {}, "weights");           // [C]: rank 1
  expect_rejected(Tensor::zeros({1, 2, 3, 4}), {}, "weights");  // [B, H, R, C]: pick one B
  expect_rejected(Tensor::zeros({2, 3}, DType::boolean), {}, "weights");
  expect_rejected(Tensor::zeros({0, 3}), {}, "weights");  // no rows
  expect_rejected(Tensor::from_values({1, 2}, {0.5, INFINITY}), {}, "weights");
}

TEST(HeatmapErrors, BadOptions) {
  const Tensor weights = Tensor::zeros({2, 2, 3});  // [P=2, R=2, C=3]
  HeatmapOptions options;
  options.x_labels = {"a", "b"};
  expect_rejected(weights, options, "options.x_labels");
  options = {};
  options.y_labels = {"a", "b", "c"};
  expect_rejected(weights, options, "options.y_labels");
  options = {};
  options.panel_titles = {"only one"};
  expect_rejected(weights, options, "options.panel_titles");
  options = {};
  options.cell_size = -1;
  expect_rejected(weights, options, "options.cell_size");
  options = {};
  options.vmax = NAN;
  expect_rejected(weights, options, "options.vmax");
  options = {};
  options.cell_size = 1 << 30;
  expect_rejected(weights, options, "options.cell_size");
}

TEST(HeatmapErrors, BadPath) {
  const fs::path path = testing::scratch("weights.jpg");
  try {
    write_heatmap(Tensor::zeros({2, 2}), {}, path);
    ADD_FAILURE() << "no error for .jpg";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "path");
    EXPECT_NE(std::string(e.what()).find(".png or .svg"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_THROW(write_heatmap_png(Tensor::zeros({2, 2}), {}, "/nonexistent-dir/x.png"), Error);
  EXPECT_THROW(write_heatmap_svg(Tensor::zeros({2, 2}), {}, "/nonexistent-dir/x.svg"), Error);
}

}  // namespace
}  // namespace qkv::viz
