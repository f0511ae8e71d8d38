#include <cmath>
#include <numbers>

#include "qkv/philox.hpp"

namespace qkv {

double Generator::next_normal() noexcept {
  const double u1 = 1.0 - next_uniform();  // in (0, 1], so the log is finite
  const double u2 = next_uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace qkv
