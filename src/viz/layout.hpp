#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/viz/heatmap.hpp"
#include "viz/font.hpp"

namespace qkv::viz {

// Spacing shared by heatmap_layout and the two renderers, in pixels.
inline constexpr int kMargin = 10;         // around the figure, so nothing touches the border
inline constexpr int kGap = 4;             // between a grid and its labels or its panel title
inline constexpr int kTitleGap = 6;        // below the figure title, more than kGap to set it apart
inline constexpr int kTickLength = 4;      // color bar tick marks
inline constexpr int kTextPad = 2;         // between neighbouring labels, and a tick and its label
inline constexpr int kBarWidth = 14;       // the color bar: about two characters
inline constexpr int kMinBarHeight = 100;  // a short grid (1 or 2 rows) still gets a readable bar
inline constexpr int kTickCount = 5;       // vmin, three quarters between, vmax
// Tick labels are formatted "%.3g", at most 9 characters ("-1.23e-05"); the layout does not see
// the weights, so it reserves that much.
inline constexpr int kTickChars = 9;

// The given labels, or "0", "1", ... when none are given.
std::vector<std::string> axis_labels(const std::vector<std::string>& given, std::int64_t count);
// The given panel titles, or "head 0", "head 1", ...
std::vector<std::string> panel_titles(const std::vector<std::string>& given, std::int64_t count);

}  // namespace qkv::viz
