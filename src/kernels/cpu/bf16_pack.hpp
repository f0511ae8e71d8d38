#pragma once

// The B operands of bf16_gemm.hpp from the kernels' tiles: B in pairs, from
// a row-major source (V: B[k][n] = V[k][n]) or a transposed one (K^T: B[k][n] = K[n][k]). Every
// element past the source's extent is zero, so padding to whole tiles adds nothing to C.

#include <cstdint>
#include <cstring>

namespace qkv::kernels::cpu {

// B [depth, N] in pairs <- src [rows, cols] bf16 (leading dimension lds): B[k][n] = src[k][n] for
// k < rows, n < cols, else 0. Each pair is built as one 32-bit word (row k in the low half), a loop
// the compiler vectorizes: 16-bit stores into every other element took a forward of bf16 q, k, v
// at T = 4096 about 5% of its time in packing V.
inline void pack_pairs_rows(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
                            std::int64_t cols, std::int64_t depth, std::int64_t N,
                            std::uint16_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(depth * N) * 2);
  for (std::int64_t k = 0; k < rows; k += 2) {
    const std::uint16_t* even = src + k * lds;
    const std::uint16_t* odd = k + 1 < rows ? even + lds : nullptr;
    std::uint16_t* pairs = dst + (k / 2) * N * 2;
    for (std::int64_t n = 0; n < cols; ++n) {
      const std::uint32_t word = static_cast<std::uint32_t>(even[n]) |
                                 (odd != nullptr ? static_cast<std::uint32_t>(odd[n]) << 16 : 0u);
      std::memcpy(pairs + 2 * n, &word, 4);
    }
  }
}

// B [depth, N] in pairs <- the transpose of src [cols, rows] bf16 (leading dimension lds):
// B[k][n] = src[n][k] for k < rows, n < cols, else 0. A pair (k, k + 1) of column n is the 32-bit
// word at src[n][k]: one copy per pair, and a 16-bit one for an odd last k.
inline void pack_pairs_transposed(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
                                  std::int64_t cols, std::int64_t depth, std::int64_t N,
                                  std::uint16_t* dst) {
  std::memset(dst, 0, static_cast<size_t>(depth * N) * 2);
  const std::int64_t even_rows = rows / 2 * 2;
  for (std::int64_t n = 0; n < cols; ++n) {
    const std::uint16_t* column = src + n * lds;
    for (std::int64_t k = 0; k < even_rows; k += 2) {
      std::memcpy(dst + ((k / 2) * N + n) * 2, column + k, 4);
    }
    if (even_rows < rows) dst[((even_rows / 2) * N + n) * 2] = column[even_rows];
  }
}

}  // namespace qkv::kernels::cpu
