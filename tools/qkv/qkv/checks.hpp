#pragma once

// Checks of option values. A value that fails one is a usage error (exit status 2, the message
// and the command's usage on stderr): "--steps: expected an integer >= 0, got -3".

#include <CLI/CLI.hpp>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>

namespace qkv::cli {

// Decimal integers in [min, max], for an option of type T. A transform (Option::transform): the
// text is rewritten in plain decimal, as CLI11 itself converts with base 0 (010 would be 8, 0x10
// 16) and wraps -1 into an unsigned option.
template <class T>
CLI::Validator integer(T min, T max = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T>);
  const bool bounded = max != std::numeric_limits<T>::max();
  const std::string range = bounded
                                ? "in [" + std::to_string(min) + ", " + std::to_string(max) + "]"
                                : ">= " + std::to_string(min);
  const std::string description = bounded    ? range
                                  : min == 0 ? "NONNEGATIVE"
                                  : min == 1 ? "POSITIVE"
                                             : range;
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        T value{};
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range) {
          return "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                 "], got " + text;
        }
        if (error != std::errc() || stop != end || value < min || value > max) {
          return "expected an integer " + range + ", got " + text;
        }
        text = std::to_string(value);
        return "";
      },
      description);
}

// Finite numbers > 0 (or >= 0 with allow_zero); nan and inf are refused.
inline CLI::Validator finite_number(bool allow_zero) {
  const std::string range = allow_zero ? ">= 0" : "> 0";
  return CLI::Validator(
      [allow_zero, range](std::string& text) -> std::string {
        double value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error != std::errc() || stop != end || !std::isfinite(value) || value < 0 ||
            (value == 0 && !allow_zero)) {
          return "expected a finite number " + range + ", got " + text;
        }
        return "";
      },
      allow_zero ? "NONNEGATIVE" : "POSITIVE");
}

// Output files whose extension is .png or .svg (any case): the formats qkv::viz::write_heatmap
// picks by it.
inline CLI::Validator image_file() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::string extension = std::filesystem::path(text).extension().string();
        for (char& c : extension)
          c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (extension == ".png" || extension == ".svg") return "";
        return "expected a file name ending in .png or .svg, got " + text;
      },
      "PNG|SVG");
}

// Text with at least one character that is not a space (a sentence, a name).
inline CLI::Validator not_blank() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        for (const char c : text) {
          if (!std::isspace(static_cast<unsigned char>(c))) return "";
        }
        return "expected some text, got \"" + text + "\"";
      },
      "");
}

}  // namespace qkv::cli
