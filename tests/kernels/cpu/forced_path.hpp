#pragma once

// The fused forward's bf16 products forced onto one path (kernels/cpu/bf16_gemm.hpp), or with
// nullopt onto none (f32 products), for as long as the guard lives.

#include <optional>

#include "kernels/cpu/bf16_gemm.hpp"

namespace qkv::testing {

struct ForcedPath {
  explicit ForcedPath(std::optional<kernels::cpu::MatrixPath> path) {
    kernels::cpu::force_fused_path(path);
  }
  ~ForcedPath() { kernels::cpu::reset_fused_path(); }
  ForcedPath(const ForcedPath&) = delete;
  ForcedPath& operator=(const ForcedPath&) = delete;
};

}  // namespace qkv::testing
