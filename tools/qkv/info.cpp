#include <cstdio>
#include <string>
#include <vector>

#include "qkv/commands.hpp"
#include "qkv/system.hpp"
#include "qkv/version.hpp"

namespace qkv::cli {

void add_info(CLI::App& app) {
  CLI::App* info = app.add_subcommand(
      "info", "Print the version, SIMD targets, CPU features, matrix paths and threads");
  info->callback([] {
    std::printf("qkv %s\n", std::string(version()).c_str());
    const auto joined = [](const std::vector<std::string>& words) {
      std::string line;
      for (const std::string& w : words) line += (line.empty() ? "" : " ") + w;
      return line;
    };
    std::printf("simd targets: %s\n", joined(simd_targets()).c_str());
    std::printf("cpu features: %s\n", joined(cpu_features()).c_str());
    std::printf("bf16 matrix paths (best first): %s\n", joined(matrix_paths()).c_str());
    std::printf("blas kernels: %s\n", blas_kernels().c_str());
    std::printf("threads: %d\n", num_threads());
  });
}

}  // namespace qkv::cli
