#pragma once

// The bf16 kernels' runs in the tests: every matrix path to test (the emulated AMX tiles, and
// every hardware path this CPU runs; the rest printed), each with Highway's bf16 rounding and,
// where the CPU has AVX512-BF16, the hardware paths with its own (kernels/cpu/exp_round_bf16.hpp).

#include <cstdio>
#include <utility>
#include <vector>

#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/exp_round_bf16.hpp"

namespace qkv::testing {

inline std::vector<kernels::cpu::MatrixPath> bf16_paths() {
  using kernels::cpu::MatrixPath;
  std::vector<MatrixPath> out = {MatrixPath::amx_emulated};
  for (const MatrixPath p : {MatrixPath::amx_bf16, MatrixPath::avx512_bf16}) {
    if (kernels::cpu::path_available(p)) {
      out.push_back(p);
    } else {
      std::printf("[ NOTE     ] not run here (this CPU lacks it): %s\n",
                  kernels::cpu::path_name(p));
    }
  }
  return out;
}

// The kernels round to bf16 in Highway's lanes (portable) or by the CPU's instructions for as
// long as it lives.
struct PortableRounding {
  explicit PortableRounding(bool portable) { kernels::cpu::force_portable_rounding(portable); }
  ~PortableRounding() { kernels::cpu::force_portable_rounding(false); }
  PortableRounding(const PortableRounding&) = delete;
  PortableRounding& operator=(const PortableRounding&) = delete;
};

// Every path of bf16_paths() with Highway's rounding (true), and the hardware paths with the CPU's
// (false) where it has one. The CPU's rounding on the emulated tiles would test nothing the
// hardware paths do not: rounding and products meet only in P's bf16 buffer, the same for every
// path; and it cost a sixth of the AddressSanitizer suite on an Intel Xeon VM (2026-11-27).
inline std::vector<std::pair<kernels::cpu::MatrixPath, bool>> bf16_runs() {
  const bool native = kernels::cpu::native_exp_round_row() != nullptr;
  if (!native) std::printf("[ NOTE     ] not run here (no AVX512-BF16): the CPU's bf16 rounding\n");
  std::vector<std::pair<kernels::cpu::MatrixPath, bool>> out;
  for (const kernels::cpu::MatrixPath path : bf16_paths()) {
    out.emplace_back(path, true);
    if (native && path != kernels::cpu::MatrixPath::amx_emulated) out.emplace_back(path, false);
  }
  return out;
}

}  // namespace qkv::testing
