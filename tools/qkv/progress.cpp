// The progress bar of long-running subcommands (qkv demo).
#include "qkv/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace qkv::cli {

namespace {
constexpr int kWidth = 30;  // characters of the bar itself
}

ProgressBar::ProgressBar(std::int64_t total, std::string unit)
    : total_(total < 1 ? 1 : total),
      unit_(std::move(unit)),
      terminal_(isatty(STDOUT_FILENO) != 0) {}

void ProgressBar::update(std::int64_t done, const std::string& text) {
  if (terminal_) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
    last_draw_ = now;
    draw(done, text, false);
  } else if (done >= next_report_) {
    draw(done, text, true);
    next_report_ = done + std::max<std::int64_t>(1, total_ / 10);
  }
}

void ProgressBar::finish(const std::string& text) { draw(total_, text, true); }

void ProgressBar::draw(std::int64_t done, const std::string& text, bool newline) {
  done = std::min(done, total_);
  const int filled = static_cast<int>(kWidth * done / total_);
  std::string bar(static_cast<std::size_t>(kWidth), ' ');
  for (int i = 0; i < filled; ++i) bar[static_cast<std::size_t>(i)] = '=';
  if (filled < kWidth) bar[static_cast<std::size_t>(filled)] = '>';
  std::printf("%s[%s] %lld/%lld%s  %s%s", terminal_ ? "\r\033[K" : "", bar.c_str(),
              static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(),
              text.c_str(), newline ? "\n" : "");
  std::fflush(stdout);
}

std::string format_fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(std::llround(seconds < 0 ? 0 : seconds));
  char buffer[32];
  if (s < 60) {
    std::snprintf(buffer, sizeof buffer, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buffer, sizeof buffer, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buffer, sizeof buffer, "%lldh%02lldm", s / 3600, s / 60 % 60);
  }
  return buffer;
}

}  // namespace qkv::cli
