#include "viz/ticks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "viz/font.hpp"
#include "viz/layout.hpp"
#include "viz/text.hpp"

namespace qkv::viz {
namespace {

// Between two horizontal labels: one character's width, so "100" "200" never read as "100200".
constexpr int kLabelGap = font::kWidth;
// Tolerance for n * step or 10^k that should land on a limit but misses it by rounding.
constexpr double kEps = 1e-9;

int floor_log10(double value) { return static_cast<int>(std::floor(std::log10(value) + kEps)); }

double pow10(int k) { return std::pow(10.0, k); }

// How far along the axis a label reaches.
int extent(const std::string& label, bool horizontal) {
  return horizontal ? text_width(label) : font::kHeight;
}

bool apart(const AxisTick& a, const AxisTick& b, bool horizontal) {
  const int distance = std::abs(b.pixel - a.pixel);
  const int gap = horizontal ? kLabelGap : kTextPad;
  return distance >= kMinTickSpacing &&
         2 * distance >= extent(a.label, horizontal) + extent(b.label, horizontal) + 2 * gap;
}

bool labels_fit(const std::vector<AxisTick>& ticks, bool horizontal) {
  const AxisTick* previous = nullptr;
  for (const AxisTick& tick : ticks) {
    if (tick.label.empty()) continue;
    if (previous != nullptr && !apart(*previous, tick, horizontal)) return false;
    previous = &tick;
  }
  return true;
}

// Left to right, a tick keeps its label only when it is apart from the last one labeled.
void thin_labels(std::vector<AxisTick>& ticks, bool horizontal) {
  const AxisTick* previous = nullptr;
  for (AxisTick& tick : ticks) {
    if (tick.label.empty()) continue;
    if (previous != nullptr && !apart(*previous, tick, horizontal)) {
      tick.label.clear();
    } else {
      previous = &tick;
    }
  }
}

AxisTick make_tick(const AxisScale& scale, double value, int exponent, bool major) {
  AxisTick tick;
  tick.value = value;
  tick.pixel = static_cast<int>(std::lround(scale.pixel(value)));
  tick.major = major;
  if (major) tick.label = tick_label(value, exponent);
  return tick;
}

// The multiples n of m * 10^k with n * m * 10^k within the limits, as [first, last].
struct Multiples {
  double first, last;
};
Multiples multiples(const AxisScale& scale, double step) {
  return {std::ceil(scale.min / step - kEps), std::floor(scale.max / step + kEps)};
}

std::vector<AxisTick> step_ticks(const AxisScale& scale, int m, int k) {
  const double step = m * pow10(k);
  const Multiples n = multiples(scale, step);
  std::vector<AxisTick> ticks;
  // Counted apart from n: past 2^53, n + 1 == n in a double.
  for (std::int64_t i = 0; i <= static_cast<std::int64_t>(n.last - n.first); ++i) {
    ticks.push_back(make_tick(scale, (n.first + static_cast<double>(i)) * step, k, true));
  }
  return ticks;
}

std::vector<AxisTick> linear_ticks(const AxisScale& scale, bool horizontal) {
  const int top = floor_log10(scale.max - scale.min);
  int last_m = 1, last_k = top - 3;  // the largest step with a tick in range so far
  for (int k = top - 3; k <= top + 1; ++k) {
    for (const int m : {1, 2, 5}) {
      const double step = m * pow10(k);
      const Multiples n = multiples(scale, step);
      if (n.last < n.first) break;
      last_m = m;
      last_k = k;
      // Ticks are closest together at the top end (a log-mapped axis squeezes large values).
      const double gap = std::abs(scale.pixel(scale.max) - scale.pixel(scale.max - step));
      if (gap < kMinTickSpacing) continue;
      std::vector<AxisTick> ticks = step_ticks(scale, m, k);
      if (labels_fit(ticks, horizontal)) return ticks;
    }
  }
  // The axis is too short for two labels at any step with ticks in range: label what fits.
  std::vector<AxisTick> ticks = step_ticks(scale, last_m, last_k);
  thin_labels(ticks, horizontal);
  return ticks;
}

std::vector<AxisTick> log_ticks(const AxisScale& scale, bool horizontal) {
  const int low = floor_log10(scale.min);
  const int first = static_cast<int>(std::ceil(std::log10(scale.min) - kEps));
  const int last = floor_log10(scale.max);
  const auto in_range = [&](double v) {
    return v >= scale.min * (1 - kEps) && v <= scale.max * (1 + kEps);
  };
  if (last - first >= 1) {
    std::vector<AxisTick> ticks;
    int stride = 1;
    // Strides 1, 2, 3, 5, 10, 20, 30, 50, ...: the first whose labels fit.
    for (int base = 1; ticks.empty(); base *= 10) {
      for (const int m : {1, 2, 3, 5}) {
        stride = m * base;
        std::vector<AxisTick> candidate;
        bool labeled = false;
        for (int k = first; k <= last; ++k) {
          candidate.push_back(make_tick(scale, pow10(k), k, true));
          if (k % stride != 0) candidate.back().label.clear();
          labeled |= !candidate.back().label.empty();
        }
        if (!labeled) candidate.front().label = tick_label(pow10(first), first);
        if (labels_fit(candidate, horizontal) || stride > last - first) {
          ticks = std::move(candidate);
          break;
        }
      }
    }
    const double decade = std::abs(scale.pixel(pow10(first + 1)) - scale.pixel(pow10(first)));
    if (stride == 1 && decade >= kMinMinorDecade) {
      for (int k = low; k <= last; ++k) {
        for (const int m : {2, 5}) {
          if (in_range(m * pow10(k))) ticks.push_back(make_tick(scale, m * pow10(k), k, false));
        }
      }
      std::sort(ticks.begin(), ticks.end(),
                [](const AxisTick& a, const AxisTick& b) { return a.value < b.value; });
    }
    return ticks;
  }
  std::vector<AxisTick> ticks;
  for (int k = low; k <= last; ++k) {
    for (const int m : {1, 2, 5}) {
      if (in_range(m * pow10(k))) ticks.push_back(make_tick(scale, m * pow10(k), k, true));
    }
  }
  if (ticks.size() < 2) return linear_ticks(scale, horizontal);
  thin_labels(ticks, horizontal);
  return ticks;
}

}  // namespace

double AxisScale::pixel(double value) const {
  const double t = log ? (std::log10(value) - std::log10(min)) / (std::log10(max) - std::log10(min))
                       : (value - min) / (max - min);
  return first + t * (last - first);
}

std::vector<AxisTick> choose_ticks(const AxisScale& scale, bool horizontal) {
  return scale.log ? log_ticks(scale, horizontal) : linear_ticks(scale, horizontal);
}

std::string tick_label(double value, int exponent) {
  if (value == 0) return "0";
  char text[40];
  if (exponent >= -4 && exponent <= 4) {
    std::snprintf(text, sizeof text, "%.*f", std::max(0, -exponent), value);
    return text;
  }
  // "%e" writes "2.5e+06": keep the mantissa's digits down to 10^exponent, the exponent bare.
  const int digits = std::max(0, floor_log10(std::abs(value)) - exponent);
  std::snprintf(text, sizeof text, "%.*e", digits, value);
  const std::string written = text;
  const std::size_t e = written.find('e');
  return written.substr(0, e + 1) + std::to_string(std::stoi(written.substr(e + 1)));
}

}  // namespace qkv::viz
