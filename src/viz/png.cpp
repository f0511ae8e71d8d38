// PNG heatmaps: the figure is drawn into an RGB buffer (text from the embedded font blended by
// its coverage), then encoded with libpng's simplified API.
#include <png.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/viz/heatmap.hpp"
#include "viz/figure.hpp"
#include "viz/font.hpp"
#include "viz/layout.hpp"
#include "viz/text.hpp"

namespace qkv::viz {
namespace {

constexpr Rgb kInk{32, 32, 32};  // text and lines: near black, softer than pure black

class Canvas {
 public:
  // White, like the page the figure goes on.
  Canvas(int width, int height)
      : width_(width), height_(height), rgb_(3 * std::size_t(width) * height, 255) {}

  const std::uint8_t* data() const { return rgb_.data(); }

  // Pixels outside the canvas are dropped, so callers need not clip.
  void blend(int x, int y, Rgb color, int alpha) {
    if (x < 0 || y < 0 || x >= width_ || y >= height_ || alpha == 0) return;
    std::uint8_t* px = &rgb_[3 * (std::size_t(y) * width_ + x)];
    const std::uint8_t channels[3] = {color.r, color.g, color.b};
    for (int k = 0; k < 3; ++k) {
      px[k] = std::uint8_t((px[k] * (255 - alpha) + channels[k] * alpha + 127) / 255);
    }
  }

  void fill(int x, int y, int w, int h, Rgb color) {
    for (int j = y; j < y + h; ++j) {
      for (int i = x; i < x + w; ++i) blend(i, j, color, 255);
    }
  }

  // Horizontal text whose cells start at (x, top).
  void text(int x, int top, std::string_view text, Rgb color) {
    for (char32_t c : decode_utf8(text)) {
      for (int v = 0; v < font::kHeight; ++v) {
        for (int u = 0; u < font::kWidth; ++u) {
          blend(x + u, top + v, color, font::coverage(c, u, v));
        }
      }
      x += font::kWidth;
    }
  }

  // Text turned 90 degrees counterclockwise, reading upwards from bottom, the tops of the letters
  // facing left, the letters' cells in columns [left, left + font::kHeight).
  void text_up(int left, int bottom, std::string_view text, Rgb color) {
    for (char32_t c : decode_utf8(text)) {
      for (int v = 0; v < font::kHeight; ++v) {
        for (int u = 0; u < font::kWidth; ++u) {
          blend(left + v, bottom - 1 - u, color, font::coverage(c, u, v));
        }
      }
      bottom -= font::kWidth;
    }
  }

 private:
  int width_, height_;
  std::vector<std::uint8_t> rgb_;
};

void draw(const Figure& figure, Canvas& canvas) {
  const HeatmapLayout& layout = figure.layout;
  const int cell = layout.cell_size;
  const int grid_w = static_cast<int>(figure.cols) * cell;
  const int grid_h = static_cast<int>(figure.rows) * cell;
  constexpr int kH = font::kHeight;
  if (!figure.title.empty()) {
    canvas.text((layout.width - text_width(figure.title)) / 2, kMargin, figure.title, kInk);
  }
  for (std::int64_t p = 0; p < figure.panels; ++p) {
    const int x0 = layout.panel_x[p];
    const int y0 = layout.panel_y;
    const std::string& title = figure.titles[p];
    canvas.text(x0 + (grid_w - text_width(title)) / 2, y0 - kGap - kH, title, kInk);
    for (std::int64_t r = 0; r < figure.rows; ++r) {
      for (std::int64_t c = 0; c < figure.cols; ++c) {
        canvas.fill(x0 + int(c) * cell, y0 + int(r) * cell, cell, cell, figure.color(p, r, c));
      }
    }
    for (std::int64_t r = 0; r < figure.rows; r += layout.y_label_step) {
      const std::string& label = figure.y_labels[r];
      canvas.text(x0 - kGap - text_width(label), y0 + int(r) * cell + (cell - kH) / 2, label, kInk);
    }
    for (std::int64_t c = 0; c < figure.cols; c += layout.x_label_step) {
      const std::string& label = figure.x_labels[c];
      const int center = x0 + int(c) * cell + cell / 2;
      const int top = y0 + grid_h + kGap;
      if (layout.x_labels_vertical) {
        canvas.text_up(center - kH / 2, top + text_width(label), label, kInk);
      } else {
        canvas.text(center - text_width(label) / 2, top, label, kInk);
      }
    }
  }
  const int bar_x = layout.colorbar_x;
  const int bar_y = layout.colorbar_y;
  const int bar_h = layout.colorbar_height;
  for (int j = 0; j < bar_h; ++j) {
    canvas.fill(bar_x, bar_y + j, layout.colorbar_width, 1,
                viridis(1.0 - static_cast<double>(j) / std::max(bar_h - 1, 1)));
  }
  const int bar_right = bar_x + layout.colorbar_width;
  for (const Figure::Tick& tick : figure.ticks) {
    canvas.fill(bar_right, tick.y, kTickLength, 1, kInk);
    canvas.text(bar_right + kTickLength + kTextPad, tick.y - kH / 2, tick.label, kInk);
  }
}

}  // namespace

// weights [R, C] or [P, R, C]
void write_heatmap_png(const Tensor& weights, const HeatmapOptions& options,
                       const std::filesystem::path& path) {
  const Figure figure = make_figure(weights, options);
  Canvas canvas(figure.layout.width, figure.layout.height);
  draw(figure, canvas);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(figure.layout.width);
  image.height = static_cast<png_uint_32>(figure.layout.height);
  image.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&image, path.c_str(), 0, canvas.data(), 0, nullptr)) {
    const std::string message = image.message;
    std::error_code ignored;
    std::filesystem::remove(path, ignored);  // libpng may have left a partial file
    throw Error("path", "a writable PNG file", path.string() + " (" + message + ")");
  }
}

}  // namespace qkv::viz
