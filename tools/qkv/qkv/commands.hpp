#pragma once

#include <CLI/CLI.hpp>

namespace qkv::cli {

// Each subcommand registers itself on the app and runs when parsed.
void add_info(CLI::App& app);

}  // namespace qkv::cli
