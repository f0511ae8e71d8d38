#include "viz/raster.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace qkv::viz {
namespace {

// The pixels [lo, hi] of `clip` along one axis that lie within [from, to].
void span(double from, double to, int clip_start, int clip_size, int& lo, int& hi) {
  lo = std::max(clip_start, static_cast<int>(std::floor(from)));
  hi = std::min(clip_start + clip_size - 1, static_cast<int>(std::ceil(to)));
}

bool inside(const std::vector<PlotPoint>& outline, double x, double y) {
  if (outline.empty()) return x * x + y * y <= kMarkerRadius * kMarkerRadius;
  // Convex and listed clockwise on screen (y down): inside is right of every edge.
  for (std::size_t k = 0; k < outline.size(); ++k) {
    const PlotPoint& a = outline[k];
    const PlotPoint& b = outline[(k + 1) % outline.size()];
    if ((b.x - a.x) * (y - a.y) - (b.y - a.y) * (x - a.x) < 0) return false;
  }
  return true;
}

}  // namespace

void stroke_polylines(Canvas& canvas, const std::vector<std::vector<PlotPoint>>& polylines,
                      Rgb color, DashPattern dash, const PixelRect& clip) {
  if (clip.width <= 0 || clip.height <= 0) return;
  constexpr double kHalf = kLineWidth / 2;
  const double period = dash.on + dash.off;
  std::vector<float> cover(static_cast<std::size_t>(clip.width) * clip.height, 0.0f);
  for (const std::vector<PlotPoint>& line : polylines) {
    double walked = 0.0;  // length along the polyline where the segment starts
    for (std::size_t s = 0; s + 1 < line.size(); ++s) {
      const PlotPoint a = line[s];
      const PlotPoint b = line[s + 1];
      const double dx = b.x - a.x;
      const double dy = b.y - a.y;
      const double length2 = dx * dx + dy * dy;
      const double length = std::sqrt(length2);
      int x_lo, x_hi, y_lo, y_hi;
      span(std::min(a.x, b.x) - kHalf - 1, std::max(a.x, b.x) + kHalf + 1, clip.x, clip.width, x_lo,
           x_hi);
      span(std::min(a.y, b.y) - kHalf - 1, std::max(a.y, b.y) + kHalf + 1, clip.y, clip.height,
           y_lo, y_hi);
      for (int y = y_lo; y <= y_hi; ++y) {
        for (int x = x_lo; x <= x_hi; ++x) {
          const double t =
              length2 > 0 ? std::clamp(((x - a.x) * dx + (y - a.y) * dy) / length2, 0.0, 1.0) : 0;
          const double distance = std::hypot(x - (a.x + t * dx), y - (a.y + t * dy));
          const double c = std::clamp(kHalf + 0.5 - distance, 0.0, 1.0);
          if (c == 0) continue;
          if (period > 0 && std::fmod(walked + t * length, period) >= dash.on) continue;
          float& covered = cover[static_cast<std::size_t>(y - clip.y) * clip.width + (x - clip.x)];
          covered = std::max(covered, static_cast<float>(c));
        }
      }
      walked += length;
    }
  }
  for (int y = 0; y < clip.height; ++y) {
    for (int x = 0; x < clip.width; ++x) {
      const float c = cover[static_cast<std::size_t>(y) * clip.width + x];
      if (c > 0)
        canvas.blend(clip.x + x, clip.y + y, color, static_cast<int>(std::lround(c * 255)));
    }
  }
}

void fill_marker(Canvas& canvas, PlotPoint center, Marker marker, Rgb color,
                 const PixelRect& clip) {
  if (marker == Marker::none) return;
  const std::vector<PlotPoint> outline = marker_outline(marker);
  constexpr double kReach = 5.0;  // every marker fits in a square of +-kReach
  constexpr int kSamples = 4;
  int x_lo, x_hi, y_lo, y_hi;
  span(center.x - kReach, center.x + kReach, clip.x, clip.width, x_lo, x_hi);
  span(center.y - kReach, center.y + kReach, clip.y, clip.height, y_lo, y_hi);
  for (int y = y_lo; y <= y_hi; ++y) {
    for (int x = x_lo; x <= x_hi; ++x) {
      int hits = 0;
      for (int j = 0; j < kSamples; ++j) {
        for (int i = 0; i < kSamples; ++i) {
          const double sx = x - 0.5 + (i + 0.5) / kSamples - center.x;
          const double sy = y - 0.5 + (j + 0.5) / kSamples - center.y;
          hits += inside(outline, sx, sy) ? 1 : 0;
        }
      }
      canvas.blend(x, y, color, hits * 255 / (kSamples * kSamples));
    }
  }
}

}  // namespace qkv::viz
