#pragma once

// Rows in AVX-512 registers: a bf16 row's 32-element steps, and 16 x 16 transposes of 32-bit
// lanes, for the files compiled with -mavx512f -mavx512bw (CMakeLists.txt's qkv_matrix_unit_flags):
// include it from no other.
#include <immintrin.h>

#include <cstdint>

namespace qkv::kernels::cpu::avx512 {

// The elements [x, x + 32) of a row of dim bf16, zero past dim (never read).
inline __m512i bf16_step(const std::uint16_t* row, std::int64_t x, std::int64_t dim) {
  if (x + 32 <= dim) return _mm512_loadu_si512(row + x);
  const auto keep = static_cast<__mmask32>((std::uint64_t{1} << (dim - x)) - 1);
  return _mm512_maskz_loadu_epi16(keep, row + x);
}

// 128-bit lanes of a and b as _mm512_shuffle_f32x4 picks them, and the unpacks, in their
// zero-masked forms under a full mask: the same instructions, since g++ 12 warns of the undefined
// operand inside the plain ones.
template <int kImm>
inline __m512 lanes_of(__m512 a, __m512 b) {
  return _mm512_maskz_shuffle_f32x4(0xFFFF, a, b, kImm);
}
inline __m512 low_words(__m512 a, __m512 b) { return _mm512_maskz_unpacklo_ps(0xFFFF, a, b); }
inline __m512 high_words(__m512 a, __m512 b) { return _mm512_maskz_unpackhi_ps(0xFFFF, a, b); }
inline __m512 low_pairs(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xFF, _mm512_castps_pd(a), _mm512_castps_pd(b)));
}
inline __m512 high_pairs(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xFF, _mm512_castps_pd(a), _mm512_castps_pd(b)));
}

// m[i] lane j <- m[j] lane i, for 16 vectors of 16 32-bit lanes.
inline void transpose16(__m512* m) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = low_words(m[2 * i], m[2 * i + 1]);
    t[2 * i + 1] = high_words(m[2 * i], m[2 * i + 1]);
  }
  // u[4 i + j], 128-bit lane L: rows 4 i to 4 i + 3 of column 4 L + j.
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = low_pairs(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = high_pairs(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = low_pairs(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = high_pairs(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 x0 = lanes_of<_MM_SHUFFLE(1, 0, 1, 0)>(u[j], u[4 + j]);
    const __m512 x1 = lanes_of<_MM_SHUFFLE(3, 2, 3, 2)>(u[j], u[4 + j]);
    const __m512 y0 = lanes_of<_MM_SHUFFLE(1, 0, 1, 0)>(u[8 + j], u[12 + j]);
    const __m512 y1 = lanes_of<_MM_SHUFFLE(3, 2, 3, 2)>(u[8 + j], u[12 + j]);
    m[j] = lanes_of<_MM_SHUFFLE(2, 0, 2, 0)>(x0, y0);
    m[4 + j] = lanes_of<_MM_SHUFFLE(3, 1, 3, 1)>(x0, y0);
    m[8 + j] = lanes_of<_MM_SHUFFLE(2, 0, 2, 0)>(x1, y1);
    m[12 + j] = lanes_of<_MM_SHUFFLE(3, 1, 3, 1)>(x1, y1);
  }
}

}  // namespace qkv::kernels::cpu::avx512
