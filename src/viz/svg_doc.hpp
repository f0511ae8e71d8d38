#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <string_view>

#include "qkv/viz/color.hpp"

namespace qkv::viz {

// Text as XML character data or attribute value: markup characters escaped, malformed UTF-8 and
// control characters (which XML forbids) replaced by '?'.
std::string xml_escape(std::string_view text);
// "#rrggbb"
std::string hex(Rgb color);
// The XML declaration and the <svg> element of a width x height picture (text in the font the
// PNG's bitmaps come from, at their size, so both have one layout), and a white background.
void svg_begin(std::ostream& out, int width, int height);
// <text> with its baseline font::kBaseline below top, anchored at x ("start", "middle", "end").
void svg_text(std::ostream& out, double x, int top, const char* anchor, std::string_view label);
// Writes the document. Throws qkv::Error naming "path" (and leaves no partial file) when it cannot.
void save_svg(const std::string& svg, const std::filesystem::path& path);

}  // namespace qkv::viz
