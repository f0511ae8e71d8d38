#include <cstdio>
#include <string>

#include "qkv/commands.hpp"
#include "qkv/system.hpp"
#include "qkv/version.hpp"

namespace qkv::cli {

void add_info(CLI::App& app) {
  CLI::App* info = app.add_subcommand("info", "Print the version, SIMD targets and threads");
  info->callback([] {
    std::printf("qkv %s\n", std::string(version()).c_str());
    std::string targets;
    for (const std::string& target : simd_targets()) {
      targets += (targets.empty() ? "" : " ") + target;
    }
    std::printf("simd targets: %s\n", targets.c_str());
    std::printf("threads: %d\n", num_threads());
  });
}

}  // namespace qkv::cli
