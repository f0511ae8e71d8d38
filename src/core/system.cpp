#include "qkv/system.hpp"

#include <hwy/targets.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>

namespace qkv {

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::map<std::string, std::string> fields;  // the first processor's block
  std::string line;
  while (std::getline(cpuinfo, line) && !line.empty()) {
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);  // npos + 1: all blank, erased
    const std::size_t value = line.find_first_not_of(' ', colon + 1);
    fields.emplace(key, value == std::string::npos ? "" : line.substr(value));
  }
  const auto name = fields.find("model name");
  if (name == fields.end() || name->second.empty()) return "unknown";
  const auto family = fields.find("cpu family"), model = fields.find("model");
  if (family == fields.end() || model == fields.end()) return name->second;
  return name->second + " (family " + family->second + ", model " + model->second + ")";
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
