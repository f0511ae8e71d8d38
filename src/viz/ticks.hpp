#pragma once

#include <string>
#include <vector>

#include "qkv/viz/line_plot.hpp"

namespace qkv::viz {

// Labeled ticks are at least this far apart, so an axis carries a handful of numbers, not a row.
inline constexpr int kMinTickSpacing = 60;
// A log axis gets minor ticks at 2 and 5 when one of its decades is at least this long: 2, 5 and
// the next decade are then 12, 16 and 12 pixels apart.
inline constexpr int kMinMinorDecade = 40;

// One axis being laid out: its limits in data units and the pixel coordinates they map onto
// (first < last for x, first > last for y, whose values grow upwards).
struct AxisScale {
  double min = 0.0, max = 1.0;
  bool log = false;
  double first = 0.0, last = 1.0;
  double pixel(double value) const;
};

// Ticks at 1, 2 or 5 x 10^k steps on a linear axis, the smallest step whose labels are
// kMinTickSpacing apart and do not overlap. On a log axis spanning two decades or more: the
// decades (every one labeled, or every 2nd, 3rd, 5th, ... so that labels fit), with minor ticks at
// 2 and 5 where each decade is kMinMinorDecade long and every decade is labeled; spanning less:
// the 1, 2 and 5 x 10^k in it if two of them are, else linear steps. Horizontal labels are
// measured by their width, vertical ones by the text height. The label boxes are left empty.
std::vector<AxisTick> choose_ticks(const AxisScale& scale, bool horizontal);

// value, a multiple of 10^exponent, written with no more digits than that: "0.25", "1500",
// "0"; as "2.5e6" or "1e-5" when exponent is above 4 or below -4.
std::string tick_label(double value, int exponent);

}  // namespace qkv::viz
