#include "viz/text.hpp"

#include <cstddef>

#include "viz/font.hpp"

namespace qkv::viz {
namespace {

// How many continuation bytes follow a lead byte; -1 when the byte cannot start a code point
// (a continuation byte, or a lead of an overlong or beyond-U+10FFFF form).
int continuation_bytes(unsigned char lead) {
  if (lead < 0x80) return 0;
  if (lead >= 0xC2 && lead < 0xE0) return 1;
  if (lead >= 0xE0 && lead < 0xF0) return 2;
  if (lead >= 0xF0 && lead < 0xF5) return 3;
  return -1;
}

}  // namespace

std::u32string decode_utf8(std::string_view text) {
  // The smallest code point that needs 0, 1, 2, 3 continuation bytes: anything below is overlong.
  static constexpr char32_t kMinimum[] = {0, 0x80, 0x800, 0x10000};
  std::u32string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const int extra = continuation_bytes(lead);
    bool valid = extra >= 0 && i + extra < text.size();
    char32_t c = valid ? lead & (0x7F >> extra) : 0;
    for (int k = 1; valid && k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xC0) == 0x80;
      c = (c << 6) | (next & 0x3F);
    }
    valid = valid && c >= kMinimum[extra] && c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF);
    out.push_back(valid && c >= 0x20 ? c : U'?');
    i += valid ? extra + 1 : 1;
  }
  return out;
}

int text_width(std::string_view text) {
  return static_cast<int>(decode_utf8(text).size()) * font::kWidth;
}

}  // namespace qkv::viz
