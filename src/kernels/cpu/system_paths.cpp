// qkv/system.hpp's view of the CPU paths: what kernels/cpu/cpu_features.hpp found, which paths
// of kernels/cpu/bf16_gemm.hpp it lets run, and the BLIS kernels kernels/cpu/blas.hpp asked for.
#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/blas.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "qkv/system.hpp"

namespace qkv {

std::vector<std::string> cpu_features() { return kernels::cpu::cpu_features().names(); }

std::vector<std::string> matrix_paths() {
  using kernels::cpu::MatrixPath;
  std::vector<std::string> paths;
  for (const MatrixPath p : {MatrixPath::amx_bf16, MatrixPath::avx512_bf16}) {
    if (kernels::cpu::path_available(p)) paths.emplace_back(kernels::cpu::path_name(p));
  }
  paths.emplace_back("f32-fma");
  return paths;
}

std::string blas_kernels() { return kernels::cpu::blas_kernels_in_use(); }

}  // namespace qkv
