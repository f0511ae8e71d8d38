#include "attention_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <vector>

#include "dtype_limits.hpp"

namespace qkv::fuzz {
namespace {

// "[b, i, h, c]" of element n of a row-major tensor of this shape.
std::string coordinates(const Shape& shape, std::int64_t n) {
  Shape index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] > 0 ? n % shape[d] : 0;
    n = shape[d] > 0 ? n / shape[d] : 0;
  }
  return shape_string(index);
}

std::string entry(const Versions& v, const std::vector<double>& fused,
                  const std::vector<double>& lo, const std::vector<double>& exact, std::size_t n) {
  std::ostringstream text;
  text.precision(9);
  text << v.name << coordinates(v.fused.shape(), static_cast<std::int64_t>(n)) << ": fused "
       << fused[n] << ", reference " << lo[n];
  if (!exact.empty()) text << ", f64 reference " << exact[n];
  return text.str();
}

// The slack of entry n: the computation's, the rounding to the dtype (of `value`, the exact
// result or its stand-in), and the floor of the subnormals.
double slack_at(const Versions& v, std::size_t n, double value) {
  const DType dtype = v.fused.dtype();
  return (*v.slack)[n] + limits(dtype).epsilon * std::abs(value) +
         16 * limits(dtype).smallest_normal;
}

}  // namespace

std::string check_pattern(const Versions& v) {
  const std::vector<double> fused = v.fused.to_vector();
  const std::vector<double> lo = v.lo.to_vector();
  const double overflow = limits(v.fused.dtype()).largest / 2;
  const auto near_overflow = [overflow](double x) {
    return std::isfinite(x) && std::abs(x) > overflow;
  };
  for (std::size_t n = 0; n < fused.size(); ++n) {
    if (near_overflow(fused[n]) || near_overflow(lo[n])) continue;
    if (std::isfinite(fused[n]) != std::isfinite(lo[n]) ||
        (std::isnan(fused[n]) != std::isnan(lo[n]) && !(*v.edge)[n])) {
      return "non-finite pattern differs at " + entry(v, fused, lo, {}, n);
    }
  }
  return {};
}

bool within_slack(const Versions& v) {
  const std::vector<double> fused = v.fused.to_vector();
  const std::vector<double> lo = v.lo.to_vector();
  for (std::size_t n = 0; n < fused.size(); ++n) {
    if (!std::isfinite(fused[n]) || !std::isfinite(lo[n])) continue;
    if (std::abs(fused[n] - lo[n]) > slack_at(v, n, lo[n])) return false;
  }
  return true;
}

std::string check_accuracy(const Versions& v) {
  const std::vector<double> fused = v.fused.to_vector();
  const std::vector<double> lo = v.lo.to_vector();
  const std::vector<double> exact = v.exact.to_vector();
  double error_lo = 0, excess = 0;
  std::size_t worst = 0;
  for (std::size_t n = 0; n < fused.size(); ++n) {
    if (!std::isfinite(exact[n]) || !std::isfinite(lo[n]) || !std::isfinite(fused[n])) continue;
    error_lo = std::max(error_lo, std::abs(lo[n] - exact[n]));
    const double excess_n = std::abs(fused[n] - exact[n]) - slack_at(v, n, exact[n]);
    if (excess_n > excess) {
      excess = excess_n;
      worst = n;
    }
  }
  if (excess <= 3 * error_lo) return {};
  std::ostringstream text;
  text.precision(3);
  text << "accuracy: |fused - f64 reference| exceeds its slack by " << excess
       << ", more than 3x the reference's error " << error_lo << "; worst at "
       << entry(v, fused, lo, exact, worst) << " (slack " << (*v.slack)[worst] << ")";
  return text.str();
}

std::string check_bitwise(const char* name, const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return std::string(name) + ": defined in one run only";
  if (!a.defined()) return {};
  const Tensor x = a.contiguous();
  const Tensor y = b.contiguous();
  const auto bytes = static_cast<std::size_t>(x.numel()) * dtype_size(x.dtype());
  if (x.shape() != y.shape() || x.dtype() != y.dtype() ||
      (bytes > 0 && std::memcmp(x.data(), y.data(), bytes) != 0)) {
    return std::string(name) + ": the two thread counts give different bits";
  }
  return {};
}

}  // namespace qkv::fuzz
