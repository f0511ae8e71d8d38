#include "viz/svg_doc.hpp"

#include <cstdio>
#include <fstream>
#include <system_error>

#include "qkv/error.hpp"
#include "viz/canvas.hpp"
#include "viz/font.hpp"
#include "viz/text.hpp"

namespace qkv::viz {

// Text as XML character data or attribute value: markup characters escaped, malformed UTF-8 and
// control characters (which XML forbids) replaced by '?'.
std::string xml_escape(std::string_view text) {
  std::string out;
  for (char32_t c : decode_utf8(text)) {
    switch (c) {
      case U'&':
        out += "&amp;";
        break;
      case U'<':
        out += "&lt;";
        break;
      case U'>':
        out += "&gt;";
        break;
      case U'"':
        out += "&quot;";
        break;
      case U'\'':
        out += "&apos;";
        break;
      default:
        if (c < 0x80) {
          out += static_cast<char>(c);
        } else {
          // Re-encode as UTF-8: 2, 3 or 4 bytes, lead byte first.
          const int extra = c < 0x800 ? 1 : c < 0x10000 ? 2 : 3;
          static constexpr unsigned char kLead[] = {0, 0xC0, 0xE0, 0xF0};
          out += static_cast<char>(kLead[extra] | (c >> (6 * extra)));
          for (int k = extra - 1; k >= 0; --k)
            out += static_cast<char>(0x80 | ((c >> (6 * k)) & 0x3F));
        }
    }
  }
  return out;
}

std::string hex(Rgb color) {
  char text[8];
  std::snprintf(text, sizeof text, "#%02x%02x%02x", color.r, color.g, color.b);
  return text;
}

void svg_begin(std::ostream& out, int width, int height) {
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << ' ' << height
      << "\" font-family=\"DejaVu Sans Mono, monospace\" font-size=\"" << font::kPixelSize
      << "\" fill=\"" << hex(kInk) << "\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
}

void svg_text(std::ostream& out, double x, int top, const char* anchor, std::string_view label) {
  out << "<text x=\"" << x << "\" y=\"" << top + font::kBaseline << "\" text-anchor=\"" << anchor
      << "\">" << xml_escape(label) << "</text>\n";
}

void save_svg(const std::string& svg, const std::filesystem::path& path) {
  std::ofstream file(path, std::ios::binary);
  if (!file || !file.write(svg.data(), static_cast<std::streamsize>(svg.size())).flush()) {
    file.close();
    std::error_code ignored;
    std::filesystem::remove(path, ignored);  // a partial file is no picture
    throw Error("path", "a writable SVG file", path.string());
  }
}

}  // namespace qkv::viz
