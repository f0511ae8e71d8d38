#pragma once

// The B operands of bf16_gemm.hpp from the kernels' tiles: B in pairs, from
// a row-major source (V: B[k][n] = V[k][n]) or a transposed one (K^T: B[k][n] = K[n][k]). Every
// element past the source's extent is zero, so padding to whole tiles adds nothing to C.

#include <cstdint>
#include <cstring>

namespace qkv::kernels::cpu {

// B [depth, N] in pairs <- src [rows, cols] bf16 (leading dimension lds): B[k][n] = src[k][n] for
// k < rows, n < cols, else 0.
inline void pack_pairs_rows(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
                            std::int64_t cols, std::int64_t depth, std::int64_t N,
                            std::uint16_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(depth * N) * 2);
  for (std::int64_t k = 0; k < rows; ++k) {
    std::uint16_t* pair_row = dst + (k / 2) * N * 2 + k % 2;
    for (std::int64_t n = 0; n < cols; ++n) pair_row[2 * n] = src[k * lds + n];
  }
}

// B [depth, N] in pairs <- the transpose of src [cols, rows] bf16 (leading dimension lds):
// B[k][n] = src[n][k] for k < rows, n < cols, else 0. With rows even, one 32-bit copy per pair.
inline void pack_pairs_transposed(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
                                  std::int64_t cols, std::int64_t depth, std::int64_t N,
                                  std::uint16_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(depth * N) * 2);
  for (std::int64_t n = 0; n < cols; ++n) {
    const std::uint16_t* column = src + n * lds;
    for (std::int64_t k = 0; k < rows; ++k) dst[((k / 2) * N + n) * 2 + k % 2] = column[k];
  }
}

}  // namespace qkv::kernels::cpu
