// SVG line plots: the same layout as the PNG; each series one <path> (a subpath per unbroken
// piece) clipped to the axes, its markers <circle>s or <polygon>s, text as <text>. Pixel n of the
// PNG spans [n, n + 1) here, so a pixel coordinate c is drawn at c + 0.5.
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/viz/line_plot.hpp"
#include "viz/canvas.hpp"
#include "viz/font.hpp"
#include "viz/layout.hpp"
#include "viz/line_plot_figure.hpp"
#include "viz/svg_doc.hpp"

namespace qkv::viz {
namespace {

void line(std::ostream& out, double x1, double y1, double x2, double y2, Rgb color) {
  out << "<line x1=\"" << x1 << "\" y1=\"" << y1 << "\" x2=\"" << x2 << "\" y2=\"" << y2
      << "\" stroke=\"" << hex(color) << "\"/>\n";
}

// The stroke attributes of a series' line: its color, width, and dashes.
std::string stroke(const PlotLine& plot_line) {
  const DashPattern dash = dash_pattern(plot_line.line);
  std::ostringstream out;
  out << "fill=\"none\" stroke=\"" << hex(plot_line.color) << "\" stroke-width=\"" << kLineWidth
      << "\" stroke-linejoin=\"round\"";
  if (dash.on > 0) {
    out << " stroke-linecap=\"butt\" stroke-dasharray=\"" << dash.on << ' ' << dash.off << '"';
  } else {
    out << " stroke-linecap=\"round\"";
  }
  return out.str();
}

void marker(std::ostream& out, PlotPoint p, Marker kind) {
  if (kind == Marker::none) return;
  const std::vector<PlotPoint> outline = marker_outline(kind);
  if (outline.empty()) {
    out << "<circle cx=\"" << p.x + 0.5 << "\" cy=\"" << p.y + 0.5 << "\" r=\"" << kMarkerRadius
        << "\"/>\n";
    return;
  }
  out << "<polygon points=\"";
  for (const PlotPoint& corner : outline) {
    out << p.x + 0.5 + corner.x << ',' << p.y + 0.5 + corner.y << ' ';
  }
  out << "\"/>\n";
}

std::string render(const LinePlot& plot) {
  const LinePlotLayout& layout = plot.layout;
  const PixelRect& axes = layout.axes;
  const int right = axes.x + axes.width - 1;
  const int bottom = axes.y + axes.height - 1;
  std::ostringstream out;
  svg_begin(out, layout.width, layout.height);
  out << "<defs><clipPath id=\"axes\"><rect x=\"" << axes.x << "\" y=\"" << axes.y << "\" width=\""
      << axes.width << "\" height=\"" << axes.height << "\"/></clipPath></defs>\n";
  out << "<g class=\"grid\" shape-rendering=\"crispEdges\">\n";
  for (const bool major : {false, true}) {
    const Rgb grid = major ? kGridMajor : kGridMinor;
    for (const AxisTick& tick : layout.x_ticks) {
      if (tick.major == major && tick.pixel > axes.x && tick.pixel < right) {
        line(out, tick.pixel + 0.5, axes.y + 1, tick.pixel + 0.5, bottom, grid);
      }
    }
    for (const AxisTick& tick : layout.y_ticks) {
      if (tick.major == major && tick.pixel > axes.y && tick.pixel < bottom) {
        line(out, axes.x + 1, tick.pixel + 0.5, right, tick.pixel + 0.5, grid);
      }
    }
  }
  out << "</g>\n<g clip-path=\"url(#axes)\">\n";
  for (const PlotLine& plot_line : plot.lines) {
    out << "<path class=\"series\" d=\"";
    for (const std::vector<PlotPoint>& piece : plot_line.strokes) {
      for (std::size_t i = 0; i < piece.size(); ++i) {
        out << (i == 0 ? 'M' : 'L') << piece[i].x + 0.5 << ' ' << piece[i].y + 0.5 << ' ';
      }
    }
    out << "\" " << stroke(plot_line) << "/>\n";
  }
  for (const PlotLine& plot_line : plot.lines) {
    out << "<g fill=\"" << hex(plot_line.color) << "\">\n";
    for (const PlotPoint& p : plot_line.markers) marker(out, p, plot_line.marker);
    out << "</g>\n";
  }
  out << "</g>\n<g class=\"axes\" shape-rendering=\"crispEdges\">\n";
  out << "<rect x=\"" << axes.x + 0.5 << "\" y=\"" << axes.y + 0.5 << "\" width=\""
      << axes.width - 1 << "\" height=\"" << axes.height - 1 << "\" fill=\"none\" stroke=\""
      << hex(kInk) << "\"/>\n";
  for (const AxisTick& tick : layout.x_ticks) {
    line(out, tick.pixel + 0.5, bottom + 1, tick.pixel + 0.5,
         bottom + 1 + (tick.major ? kMajorTickLength : kMinorTickLength), kInk);
  }
  for (const AxisTick& tick : layout.y_ticks) {
    line(out, axes.x - (tick.major ? kMajorTickLength : kMinorTickLength), tick.pixel + 0.5, axes.x,
         tick.pixel + 0.5, kInk);
  }
  out << "</g>\n";
  for (const AxisTick& tick : layout.x_ticks) {
    if (!tick.label.empty())
      svg_text(out, tick.pixel + 0.5, tick.label_box.y, "middle", tick.label);
  }
  for (const AxisTick& tick : layout.y_ticks) {
    if (!tick.label.empty()) {
      svg_text(out, tick.label_box.x + tick.label_box.width, tick.label_box.y, "end", tick.label);
    }
  }
  if (!plot.title.empty()) {
    svg_text(out, layout.title.x + layout.title.width / 2.0, layout.title.y, "middle", plot.title);
  }
  if (!plot.x_label.empty()) {
    svg_text(out, layout.x_label.x + layout.x_label.width / 2.0, layout.x_label.y, "middle",
             plot.x_label);
  }
  if (!plot.y_label.empty()) {
    // rotate(-90) turns the text's x axis upwards: it reads bottom to top, the tops of its
    // letters facing left, its baseline where the PNG's is.
    out << "<text transform=\"translate(" << layout.y_label.x + font::kBaseline << ' '
        << layout.y_label.y + layout.y_label.height / 2.0
        << ") rotate(-90)\" text-anchor=\"middle\">" << xml_escape(plot.y_label) << "</text>\n";
  }
  const PixelRect& legend = layout.legend;
  out << "<g class=\"legend\">\n<rect x=\"" << legend.x + 0.5 << "\" y=\"" << legend.y + 0.5
      << "\" width=\"" << legend.width - 1 << "\" height=\"" << legend.height - 1
      << "\" fill=\"none\" stroke=\"" << hex(kLegendFrame)
      << "\" shape-rendering=\"crispEdges\"/>\n";
  for (std::size_t i = 0; i < plot.lines.size(); ++i) {
    const PlotLine& plot_line = plot.lines[i];
    const PixelRect& row = layout.legend_rows[i];
    const double middle = row.y + kLegendRowHeight / 2 + 0.5;
    out << "<line x1=\"" << row.x << "\" y1=\"" << middle << "\" x2=\"" << row.x + kSampleLength
        << "\" y2=\"" << middle << "\" " << stroke(plot_line) << "/>\n";
    out << "<g fill=\"" << hex(plot_line.color) << "\">\n";
    marker(out, {row.x + (kSampleLength - 1) / 2.0, middle - 0.5}, plot_line.marker);
    out << "</g>\n";
    svg_text(out, row.x + kSampleLength + kGap, row.y + (kLegendRowHeight - font::kHeight) / 2,
             "start", plot_line.name);
  }
  out << "</g>\n</svg>\n";
  return out.str();
}

}  // namespace

void write_line_plot_svg(const std::vector<Series>& series, const LinePlotOptions& options,
                         const std::filesystem::path& path) {
  save_svg(render(make_line_plot(series, options)), path);
}

}  // namespace qkv::viz
