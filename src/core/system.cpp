#include "qkv/system.hpp"

#include <hwy/targets.h>

#include <cstdint>

namespace qkv {

std::vector<std::string> simd_targets() {
  // Highway numbers its targets so that a lower bit is a better (wider) instruction set.
  std::vector<std::string> names;
  const std::int64_t supported = hwy::SupportedTargets();
  for (int bit = 0; bit < 63; ++bit) {
    const std::int64_t target = std::int64_t{1} << bit;
    if ((supported & target) != 0) names.emplace_back(hwy::TargetName(target));
  }
  return names;
}

}  // namespace qkv
