// Log-log slopes and crossovers of measured curves (scaling.hpp).
#include "qkv_bench/scaling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace qkv::bench {
namespace {

// The usable points of a curve by T (the last of equal Ts wins), as T -> log ms.
std::map<double, double> logs(const Curve& curve) {
  std::map<double, double> out;
  for (const auto& [t, ms] : curve) {
    if (t > 0 && ms > 0 && std::isfinite(t) && std::isfinite(ms)) out[t] = std::log(ms);
  }
  return out;
}

}  // namespace

double loglog_slope(const Curve& curve, double from) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [t, y] : logs(curve)) {
    if (t < from) continue;
    const double x = std::log(t);
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double spread = n * sxx - sx * sx;
  if (n < 2 || !(spread > 0)) return std::numeric_limits<double>::quiet_NaN();
  return (n * sxy - sx * sy) / spread;
}

Crossover crossover(const Curve& a, const Curve& b) {
  const std::map<double, double> la = logs(a), lb = logs(b);
  std::vector<std::pair<double, double>> gaps;  // (T, log a - log b) at shared Ts
  for (const auto& [t, y] : la) {
    const auto it = lb.find(t);
    if (it != lb.end()) gaps.emplace_back(t, y - it->second);
  }
  if (gaps.empty()) return {};
  for (std::size_t n = 0; n + 1 < gaps.size(); ++n) {
    const auto [t0, g0] = gaps[n];
    const auto [t1, g1] = gaps[n + 1];
    if (g0 >= 0 && g1 < 0) {
      const double x0 = std::log(t0), x1 = std::log(t1);
      return {Crossover::Kind::interpolated, std::exp(x0 + (x1 - x0) * g0 / (g0 - g1))};
    }
  }
  if (std::all_of(gaps.begin(), gaps.end(), [](const auto& g) { return g.second < 0; })) {
    return {Crossover::Kind::below, gaps.front().first};
  }
  return {Crossover::Kind::above, gaps.back().first};
}

std::string_view kind_name(Crossover::Kind kind) noexcept {
  switch (kind) {
    case Crossover::Kind::interpolated:
      return "interpolated";
    case Crossover::Kind::below:
      return "below";
    case Crossover::Kind::above:
      return "above";
    case Crossover::Kind::none:
      break;
  }
  return "none";
}

}  // namespace qkv::bench
