#pragma once

// Errors about the files a command reads and writes name the file.

#include <filesystem>
#include <string>

#include "qkv/error.hpp"

namespace qkv::cli {

// load(path), with a qkv::Error about what the file holds (its header, a tensor, the metadata)
// thrown again as "FILE: <message>". Errors about the path itself (argument "path": missing, a
// directory, unreadable) name the file already and pass unchanged.
template <class Load>
auto load_named(const std::filesystem::path& path, Load&& load) {
  try {
    return load(path);
  } catch (const Error& e) {
    if (e.argument() == "path") throw;
    throw Error(path.string() + ": " + e.what());
  }
}

// Fails before any work when the file `option` names could not be created: its folder must
// exist ("qkv: --heatmap: expected a file in an existing folder, got out/x.png").
inline void expect_output_folder(const char* option, const std::filesystem::path& file) {
  const std::filesystem::path folder = file.parent_path().empty() ? "." : file.parent_path();
  std::error_code error;
  if (!std::filesystem::is_directory(folder, error)) {
    throw Error(option, "a file in an existing folder", file.string());
  }
}

}  // namespace qkv::cli
