#include <algorithm>
#include <cmath>
#include <cstddef>

#include "qkv/viz/heatmap.hpp"

namespace qkv::viz {
namespace {

// Viridis (matplotlib, CC0) sampled at t = 0, 1/8, ..., 1; linear interpolation between these
// nine points stays within 3 levels of the full 256-entry table.
constexpr Rgb kViridis[] = {{68, 1, 84},    {71, 44, 122},  {59, 81, 139},
                            {44, 113, 142}, {33, 144, 141}, {39, 173, 129},
                            {92, 200, 99},  {170, 220, 50}, {253, 231, 37}};
// Intervals between control points; t * kSegments picks one.
constexpr int kSegments = static_cast<int>(std::size(kViridis)) - 1;

std::uint8_t mix(std::uint8_t a, std::uint8_t b, double f) {
  return static_cast<std::uint8_t>(std::lround(a + (b - a) * f));
}

}  // namespace

Rgb viridis(double t) {
  const double x = std::clamp(std::isnan(t) ? 0.0 : t, 0.0, 1.0) * kSegments;
  const int i = std::min(static_cast<int>(x), kSegments - 1);
  const double f = x - i;
  const Rgb& a = kViridis[i];
  const Rgb& b = kViridis[i + 1];
  return {mix(a.r, b.r, f), mix(a.g, b.g, f), mix(a.b, b.b, f)};
}

}  // namespace qkv::viz
