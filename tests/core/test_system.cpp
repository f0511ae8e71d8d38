// cpu_model(): the name every measurement carries, with the family and model numbers that tell
// apart CPUs a VM names alike.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <qkv/qkv.hpp>
#include <string>

namespace qkv::testing {
namespace {

// The value of the first "key<blanks>: value" line of /proc/cpuinfo whose key is exactly `key`,
// or "" where there is none.
std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const std::size_t rest = line.find_first_not_of(" \t", key.size());
    if (rest == std::string::npos || line[rest] != ':') continue;
    const std::size_t value = line.find_first_not_of(' ', rest + 1);
    return value == std::string::npos ? "" : line.substr(value);
  }
  return "";
}

TEST(CpuModel, IsTheNameWithTheFamilyAndModelNumbers) {
  const std::string name = cpuinfo_field("model name");
  if (name.empty()) {
    EXPECT_EQ(cpu_model(), "unknown");
    return;
  }
  const std::string family = cpuinfo_field("cpu family"), model = cpuinfo_field("model");
  if (family.empty() || model.empty()) {
    EXPECT_EQ(cpu_model(), name);
    GTEST_SKIP() << "this CPU's /proc/cpuinfo has no family and model numbers";
  }
  EXPECT_EQ(cpu_model(), name + " (family " + family + ", model " + model + ")");
}

}  // namespace
}  // namespace qkv::testing
