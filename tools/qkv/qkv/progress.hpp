#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace qkv::cli {

// A one-line progress bar on stdout: "[=====>     ] 340/1200  <text>". On a terminal it redraws
// in place (at most 10 times a second); otherwise (a log, CI) it prints a line at every 10%.
class ProgressBar {
 public:
  // unit follows the counts ("340/1200 s"); "" for plain counts.
  explicit ProgressBar(std::int64_t total, std::string unit = "");
  void update(std::int64_t done, const std::string& text);
  void finish(const std::string& text);  // the full bar and a newline

 private:
  void draw(std::int64_t done, const std::string& text, bool newline);

  std::int64_t total_;
  std::string unit_;
  bool terminal_;
  std::int64_t next_report_ = 0;  // not a terminal: the step of the next line
  std::chrono::steady_clock::time_point last_draw_{};
};

std::string format_fixed(double value, int decimals);  // "1.234"
std::string format_duration(double seconds);           // "42s", "3m05s", "1h02m"

}  // namespace qkv::cli
