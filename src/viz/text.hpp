#pragma once

#include <string>
#include <string_view>

namespace qkv::viz {

// The code points of UTF-8 text; a malformed byte and a control character (below U+0020, which
// XML forbids and no font draws) each become '?'.
std::u32string decode_utf8(std::string_view text);
// Pixels the text takes in the embedded font: one cell per code point.
int text_width(std::string_view text);

}  // namespace qkv::viz
