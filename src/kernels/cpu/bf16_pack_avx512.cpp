// bf16_pack.hpp's pack_pairs_transposed and pack_pairs_rows in AVX-512, every element of B written
// once, padding included. Transposed: each block of 16 keys by 16 pairs loaded as 16 rows of 64
// bytes (zero past the rows' end and past the keys), transposed in registers and stored as 16 rows
// of B. Rows: each two rows' 32 columns interleaved in registers. Compiled with -mavx512f
// -mavx512bw (CMakeLists.txt) and called only where avx512_packing() is true.
#include <immintrin.h>

#include "kernels/cpu/avx512_rows.hpp"
#include "kernels/cpu/bf16_pack.hpp"

namespace qkv::kernels::cpu {

void pack_pairs_transposed_avx512(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
                                  std::int64_t cols, std::int64_t depth, std::int64_t N,
                                  std::uint16_t* dst) {
  for (std::int64_t k0 = 0; k0 < depth; k0 += 32) {
    // Elements [k0, k0 + 32) of a key that lie below rows.
    const std::int64_t left = rows - k0;
    const auto keep = left >= 32  ? ~__mmask32{0}
                      : left <= 0 ? __mmask32{0}
                                  : static_cast<__mmask32>((std::uint32_t{1} << left) - 1);
    for (std::int64_t n0 = 0; n0 < N; n0 += 16) {
      __m512 m[16];
      for (std::int64_t i = 0; i < 16; ++i) {
        m[i] = n0 + i < cols
                   ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(keep, src + (n0 + i) * lds + k0))
                   : _mm512_setzero_ps();
      }
      avx512::transpose16(m);
      // Pair k0 / 2 + j of keys [n0, n0 + 16): 16 words of B's row of pairs k0 / 2 + j.
      for (std::int64_t j = 0; j < 16; ++j) {
        _mm512_storeu_ps(dst + ((k0 / 2 + j) * N + n0) * 2, m[j]);
      }
    }
  }
}

bool pack_pairs_rows_avx512(const std::uint16_t* src, std::int64_t lds, std::int64_t rows,
                            std::int64_t cols, std::int64_t depth, std::int64_t N,
                            std::uint16_t* dst) {
  // VPUNPCKLWD / VPUNPCKHWD pair columns 8 L to 8 L + 3 / 8 L + 4 to 8 L + 7 in 128-bit lane L;
  // these put each 32 columns' pairs back in order, 16 words a vector.
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  const __m512i exponent = _mm512_set1_epi16(0x7f80);
  __mmask32 non_finite = 0;
  for (std::int64_t k = 0; k < depth; k += 2) {
    const std::uint16_t* even = src + k * lds;
    const bool has_even = k < rows, has_odd = k + 1 < rows;
    std::uint16_t* pairs = dst + (k / 2) * N * 2;
    for (std::int64_t n0 = 0; n0 < N; n0 += 32) {
      const std::int64_t left = cols - n0;
      const auto keep = left >= 32  ? ~__mmask32{0}
                        : left <= 0 ? __mmask32{0}
                                    : static_cast<__mmask32>((std::uint32_t{1} << left) - 1);
      const __m512i e =
          has_even ? _mm512_maskz_loadu_epi16(keep, even + n0) : _mm512_setzero_si512();
      const __m512i o =
          has_odd ? _mm512_maskz_loadu_epi16(keep, even + lds + n0) : _mm512_setzero_si512();
      non_finite |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(e, exponent), exponent) |
                    _mm512_cmpeq_epi16_mask(_mm512_and_si512(o, exponent), exponent);
      const __m512i lo = _mm512_unpacklo_epi16(e, o), hi = _mm512_unpackhi_epi16(e, o);
      _mm512_storeu_si512(pairs + 2 * n0, _mm512_permutex2var_epi64(lo, first, hi));
      if (n0 + 16 < N) {
        _mm512_storeu_si512(pairs + 2 * (n0 + 16), _mm512_permutex2var_epi64(lo, second, hi));
      }
    }
  }
  return non_finite == 0;
}

}  // namespace qkv::kernels::cpu
