#include "viz/layout.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "qkv/error.hpp"
#include "viz/text.hpp"

namespace qkv::viz {
namespace {

// An automatic cell size makes a panel's grid about this wide or tall (its larger side) ...
constexpr std::int64_t kTargetGrid = 240;
// ... within these bounds: cells bigger than this only waste room; labels need a cell at least
// one text line high (+2 so neighbours do not touch); without labels a cell may be 2 pixels.
constexpr std::int64_t kMaxAutoCell = 32;
constexpr std::int64_t kMinLabeledCell = font::kHeight + 2;
constexpr std::int64_t kMinUnlabeledCell = 2;
// 2^26 pixels is a 192 MiB RGB buffer: larger is a mistake, not a picture anyone looks at.
constexpr std::int64_t kMaxPixels = std::int64_t{1} << 26;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

int widest(const std::vector<std::string>& texts) {
  int width = 0;
  for (const std::string& text : texts) width = std::max(width, text_width(text));
  return width;
}

void check_count(const char* argument, const std::vector<std::string>& given, std::int64_t count,
                 const char* what) {
  if (!given.empty() && static_cast<std::int64_t>(given.size()) != count) {
    throw Error(argument, std::to_string(count) + " " + what + " (or none)",
                std::to_string(given.size()));
  }
}

}  // namespace

std::vector<std::string> axis_labels(const std::vector<std::string>& given, std::int64_t count) {
  if (!given.empty()) return given;
  std::vector<std::string> labels;
  for (std::int64_t i = 0; i < count; ++i) labels.push_back(std::to_string(i));
  return labels;
}

std::vector<std::string> panel_titles(const std::vector<std::string>& given, std::int64_t count) {
  if (!given.empty()) return given;
  std::vector<std::string> titles;
  for (std::int64_t i = 0; i < count; ++i) titles.push_back("head " + std::to_string(i));
  return titles;
}

HeatmapLayout heatmap_layout(std::int64_t rows, std::int64_t cols, std::int64_t panels,
                             const HeatmapOptions& options) {
  if (rows < 1 || cols < 1 || panels < 1) {
    throw Error("weights", "at least one panel, row and column",
                std::to_string(panels) + " panels of " + std::to_string(rows) + " x " +
                    std::to_string(cols));
  }
  check_count("options.x_labels", options.x_labels, cols, "labels, one per column");
  check_count("options.y_labels", options.y_labels, rows, "labels, one per row");
  check_count("options.panel_titles", options.panel_titles, panels, "titles, one per panel");
  if (options.cell_size < 0) {
    throw Error("options.cell_size", ">= 0 (0 = automatic)", std::to_string(options.cell_size));
  }
  if (!(options.vmax >= 0) || std::isinf(options.vmax)) {
    throw Error("options.vmax", "finite and >= 0 (0 = the largest weight)",
                std::to_string(options.vmax));
  }
  constexpr int kH = font::kHeight;
  const int x_text = widest(axis_labels(options.x_labels, cols));
  const int y_text = widest(axis_labels(options.y_labels, rows));
  const int title_text = widest(panel_titles(options.panel_titles, panels));
  const bool labeled = !options.x_labels.empty() || !options.y_labels.empty();
  const std::int64_t cell =
      options.cell_size > 0
          ? options.cell_size
          : std::clamp(kTargetGrid / std::max(rows, cols),
                       labeled ? kMinLabeledCell : kMinUnlabeledCell, kMaxAutoCell);

  const auto too_large = [&](const std::string& size) {
    return Error(options.cell_size > 0 ? "options.cell_size" : "weights",
                 "an image of at most 2^26 pixels",
                 size + " for " + std::to_string(panels) + " panels of " + std::to_string(rows) +
                     " x " + std::to_string(cols) + " cells of " + std::to_string(cell) + " px");
  };
  // Checked before any product of sizes, so none overflows.
  if (cell > kMaxPixels / std::max(rows, cols) || panels > kMaxPixels / (cols * cell)) {
    throw too_large("over 2^26 pixels");
  }

  HeatmapLayout layout;
  // Rows are a text line apart at least; columns either as far apart as their widest label
  // (horizontal) or a text line apart (vertical), whichever labels more of them.
  const std::int64_t y_step = ceil_div(kH, cell);
  const std::int64_t x_step_horizontal = ceil_div(x_text + kTextPad, cell);
  const std::int64_t x_step_vertical = ceil_div(kH, cell);
  layout.x_labels_vertical = x_step_horizontal > x_step_vertical;
  const std::int64_t x_step = layout.x_labels_vertical ? x_step_vertical : x_step_horizontal;
  const std::int64_t x_label_extent = layout.x_labels_vertical ? x_text : kH;

  const std::int64_t grid_w = cols * cell;
  const std::int64_t grid_h = rows * cell;
  const std::int64_t panel_w = std::max<std::int64_t>(grid_w, title_text);
  std::int64_t x = kMargin;
  std::vector<std::int64_t> panel_x;
  for (std::int64_t p = 0; p < panels; ++p) {
    panel_x.push_back(x + y_text + kGap + (panel_w - grid_w) / 2);
    // Two margins between panels, so a panel's row labels do not read as the previous grid's.
    x += y_text + kGap + panel_w + (p + 1 < panels ? 2 * kMargin : 0);
  }
  std::int64_t y = kMargin;
  if (!options.title.empty()) y += kH + kTitleGap;
  const std::int64_t panel_y = y + kH + kGap;
  const std::int64_t bar_x = x + 2 * kMargin;  // as far from the last grid as panels are apart
  const std::int64_t bar_h = std::max<std::int64_t>(grid_h, kMinBarHeight);
  const std::int64_t width =
      std::max<std::int64_t>(bar_x + kBarWidth + kTickLength + kTextPad + kTickChars * font::kWidth,
                             kMargin + text_width(options.title)) +
      kMargin;
  // The lowest tick label reaches half a line below the bar.
  const std::int64_t height =
      std::max(panel_y + grid_h + kGap + x_label_extent, panel_y + bar_h + kH / 2) + kMargin;
  if (width > kMaxPixels || height > kMaxPixels || width * height > kMaxPixels) {
    throw too_large(std::to_string(width) + " x " + std::to_string(height));
  }
  layout.width = static_cast<int>(width);
  layout.height = static_cast<int>(height);
  layout.cell_size = static_cast<int>(cell);
  for (std::int64_t px : panel_x) layout.panel_x.push_back(static_cast<int>(px));
  layout.panel_y = static_cast<int>(panel_y);
  layout.x_label_step = static_cast<int>(x_step);
  layout.y_label_step = static_cast<int>(y_step);
  layout.colorbar_x = static_cast<int>(bar_x);
  layout.colorbar_y = static_cast<int>(panel_y);
  layout.colorbar_width = kBarWidth;
  layout.colorbar_height = static_cast<int>(bar_h);
  return layout;
}

}  // namespace qkv::viz
