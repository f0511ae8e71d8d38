// SVG heatmaps: the same layout as the PNG, one <rect> per cell, text as <text> in the font the
// PNG's bitmaps come from, so a browser draws the same picture with sharper letters.
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>

#include "qkv/viz/heatmap.hpp"
#include "viz/figure.hpp"
#include "viz/font.hpp"
#include "viz/layout.hpp"
#include "viz/svg_doc.hpp"

namespace qkv::viz {
namespace {

std::string render(const Figure& figure) {
  const HeatmapLayout& layout = figure.layout;
  const int cell = layout.cell_size;
  const int grid_w = static_cast<int>(figure.cols) * cell;
  const int grid_h = static_cast<int>(figure.rows) * cell;
  constexpr int kH = font::kHeight;
  std::ostringstream out;
  svg_begin(out, layout.width, layout.height);
  // The color bar's gradient: viridis at each ninth, which is how colormap.cpp defines it.
  out << "<defs><linearGradient id=\"viridis\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n";
  constexpr int kStops = 8;
  for (int i = 0; i <= kStops; ++i) {
    const double t = static_cast<double>(i) / kStops;
    out << "<stop offset=\"" << t << "\" stop-color=\"" << hex(viridis(t)) << "\"/>\n";
  }
  out << "</linearGradient></defs>\n";
  if (!figure.title.empty()) svg_text(out, layout.width / 2, kMargin, "middle", figure.title);
  for (std::int64_t p = 0; p < figure.panels; ++p) {
    const int x0 = layout.panel_x[p];
    const int y0 = layout.panel_y;
    out << "<g class=\"panel\">\n";
    svg_text(out, x0 + grid_w / 2, y0 - kGap - kH, "middle", figure.titles[p]);
    out << "<g shape-rendering=\"crispEdges\">\n";
    for (std::int64_t r = 0; r < figure.rows; ++r) {
      for (std::int64_t c = 0; c < figure.cols; ++c) {
        out << "<rect x=\"" << x0 + c * cell << "\" y=\"" << y0 + r * cell << "\" width=\"" << cell
            << "\" height=\"" << cell << "\" fill=\"" << hex(figure.color(p, r, c)) << "\"/>\n";
      }
    }
    out << "</g>\n";
    for (std::int64_t r = 0; r < figure.rows; r += layout.y_label_step) {
      svg_text(out, x0 - kGap, y0 + int(r) * cell + (cell - kH) / 2, "end", figure.y_labels[r]);
    }
    for (std::int64_t c = 0; c < figure.cols; c += layout.x_label_step) {
      const int center = x0 + int(c) * cell + cell / 2;
      const int top = y0 + grid_h + kGap;
      if (layout.x_labels_vertical) {
        // rotate(-90) turns the text's x axis upwards; anchored at its end it hangs down from the
        // grid, the tops of its letters facing left, its baseline where the PNG's would be.
        out << "<text transform=\"translate(" << center - kH / 2 + font::kBaseline << ' ' << top
            << ") rotate(-90)\" text-anchor=\"end\">" << xml_escape(figure.x_labels[c])
            << "</text>\n";
      } else {
        svg_text(out, center, top, "middle", figure.x_labels[c]);
      }
    }
    out << "</g>\n";
  }
  const int bar_right = layout.colorbar_x + layout.colorbar_width;
  out << "<g class=\"colorbar\">\n<rect x=\"" << layout.colorbar_x << "\" y=\"" << layout.colorbar_y
      << "\" width=\"" << layout.colorbar_width << "\" height=\"" << layout.colorbar_height
      << "\" fill=\"url(#viridis)\"/>\n";
  for (const Figure::Tick& tick : figure.ticks) {
    out << "<line x1=\"" << bar_right << "\" y1=\"" << tick.y + 0.5 << "\" x2=\""
        << bar_right + kTickLength << "\" y2=\"" << tick.y + 0.5 << "\" stroke=\"#202020\"/>\n";
    svg_text(out, bar_right + kTickLength + kTextPad, tick.y - kH / 2, "start", tick.label);
  }
  out << "</g>\n</svg>\n";
  return out.str();
}

}  // namespace

// weights [R, C] or [P, R, C]
void write_heatmap_svg(const Tensor& weights, const HeatmapOptions& options,
                       const std::filesystem::path& path) {
  save_svg(render(make_figure(weights, options)), path);
}

}  // namespace qkv::viz
