#pragma once

// The B operands of bf16_gemm.hpp from the kernels' tiles: B in pairs, from
// a row-major source (V: B[k][n] = V[k][n]) or a transposed one (K^T: B[k][n] = K[n][k]). Every
// element past the source's extent is zero, so padding to whole tiles adds nothing to C.

#include <cstdint>
#include <cstring>

namespace qkv::kernels::cpu {

// B [depth, N] in pairs <- src [rows, cols] bf16 (leading dimension lds): B[k][n] = src[k][n] for
// k < rows, n < cols, else 0; true where every one of those src values is finite (exponent bits
// not all ones). Each pair is built as one 32-bit word (row k in the low half), a loop the compiler
// vectorizes: 16-bit stores into every other element took a forward of bf16 q, k, v at T = 4096
// about 5% of its time in packing V. The finiteness without an early exit, so that its loop
// vectorizes too: element by element it took as long as the packing.
inline bool pack_pairs_rows_portable(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
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
  unsigned non_finite = 0;
  for (std::int64_t k = 0; k < rows; ++k) {
    const std::uint16_t* row = src + k * lds;
    for (std::int64_t n = 0; n < cols; ++n) non_finite |= (row[n] & 0x7f80u) == 0x7f80u;
  }
  return non_finite == 0;
}

// B [depth, N] in pairs <- the transpose of src [cols, rows] bf16 (leading dimension lds):
// B[k][n] = src[n][k] for k < rows, n < cols, else 0. A pair (k, k + 1) of column n is the 32-bit
// word at src[n][k]: one copy per pair, and a 16-bit one for an odd last k.
inline void pack_pairs_transposed_portable(const std::uint16_t* src, std::int64_t lds,
                                           std::int64_t rows, std::int64_t cols, std::int64_t depth,
                                           std::int64_t N, std::uint16_t* dst) {
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

// pack_pairs_transposed_portable's B, bit for bit, by 16 x 16 transposes of 32-bit words in
// AVX-512 registers (bf16_pack_avx512.cpp), for N a multiple of 16 and depth of 32, and
// pack_pairs_rows_portable's B and answer by interleaving rows in registers, for N a multiple of
// 16 and depth of 2; called only where avx512_packing() says the CPU has AVX-512 F and BW. The
// scalar copies of one K tile (64 keys of D 128, 16 KiB) took 2.0-2.6 us, in registers 0.6 us;
// with V too, a bf16 forward (Tk 4096, Hq 8, D 128, heads first, 2 threads, AMD EPYC (family 25,
// model 17) Zen 4 VM, 2026-11-30, the two switched call by call, two rounds) took, over the
// copies' time: Tq 17 0.67-0.68, Tq 32 0.72, 64 0.91-0.92, 128 0.87-0.89, 1024 0.95-0.96. Before,
// the copies were half of the Tq 17 call's samples (perf).
void pack_pairs_transposed_avx512(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
                                  std::int64_t cols, std::int64_t depth, std::int64_t N,
                                  std::uint16_t* dst);
bool pack_pairs_rows_avx512(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
                            std::int64_t cols, std::int64_t depth, std::int64_t N,
                            std::uint16_t* dst);
bool avx512_packing();

inline bool pack_pairs_rows(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
                            std::int64_t cols, std::int64_t depth, std::int64_t N,
                            std::uint16_t* dst) {
  if (N % 16 == 0 && depth % 2 == 0 && avx512_packing()) {
    return pack_pairs_rows_avx512(src, lds, rows, cols, depth, N, dst);
  }
  return pack_pairs_rows_portable(src, lds, rows, cols, depth, N, dst);
}

inline void pack_pairs_transposed(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
                                  std::int64_t cols, std::int64_t depth, std::int64_t N,
                                  std::uint16_t* dst) {
  if (N % 16 == 0 && depth % 32 == 0 && avx512_packing()) {
    pack_pairs_transposed_avx512(src, lds, rows, cols, depth, N, dst);
  } else {
    pack_pairs_transposed_portable(src, lds, rows, cols, depth, N, dst);
  }
}

}  // namespace qkv::kernels::cpu
