#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace qkv::viz::testing {

// A path in the test's temporary directory, with no file there yet.
inline std::filesystem::path scratch(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "qkv_test_viz";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / name);
  return dir / name;
}

}  // namespace qkv::viz::testing
