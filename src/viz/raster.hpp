#pragma once

#include <vector>

#include "qkv/viz/color.hpp"
#include "qkv/viz/line_plot.hpp"
#include "viz/canvas.hpp"
#include "viz/line_plot_figure.hpp"

namespace qkv::viz {

// Polylines kLineWidth wide, antialiased: a pixel is covered by how far its center lies inside
// the line (distance to the nearest segment), which makes round joins and ends and a continuous
// line at any slope. Dashes follow the length along each polyline. Only pixels in `clip` change,
// each blended once however many segments cover it.
void stroke_polylines(Canvas& canvas, const std::vector<std::vector<PlotPoint>>& polylines,
                      Rgb color, DashPattern dash, const PixelRect& clip);

// A marker centered at `center`, filled, its edge antialiased with 4 x 4 samples a pixel; only
// pixels in `clip` change.
void fill_marker(Canvas& canvas, PlotPoint center, Marker marker, Rgb color, const PixelRect& clip);

}  // namespace qkv::viz
