#pragma once

// How a time grows with the sequence length, from measured (T, ms) points: the slope on log-log
// axes (1 for linear attention, 2 for full softmax attention) and the T where one curve crosses
// below another (`qkv bench --variants`: where linear attention overtakes the fused softmax
// kernel).

#include <string_view>
#include <utility>
#include <vector>

namespace qkv::bench {

// (T, ms) pairs, any order; points with T <= 0 or ms <= 0 are skipped.
using Curve = std::vector<std::pair<double, double>>;

// The least-squares slope of log ms against log T over the points with T >= from; NaN with fewer
// than two such points of different T.
double loglog_slope(const Curve& curve, double from = 0);

struct Crossover {
  enum class Kind { interpolated, below, above, none };
  // interpolated: `a` is slower than `b` at one measured T and faster at the next, and they cross
  // at t (log-log interpolation between the two). below: a is faster at every shared T (t: the
  // smallest); above: a is slower at every shared T (t: the largest); none: no shared T.
  Kind kind = Kind::none;
  double t = 0;
};
// Where a crosses below b, over the T both curves have.
Crossover crossover(const Curve& a, const Curve& b);
std::string_view kind_name(Crossover::Kind kind) noexcept;  // "interpolated", "below", ...

}  // namespace qkv::bench
