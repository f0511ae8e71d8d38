#include "qkv/system.hpp"

#include <hwy/targets.h>

#include <cstdint>
#include <fstream>

namespace qkv {

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) {
        const std::size_t start = line.find_first_not_of(' ', colon + 1);
        if (start != std::string::npos) return line.substr(start);
      }
    }
  }
  return "unknown";
}

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
