// bf16_gemm.hpp's VDPBF16PS path: register tiles of 4 rows x 4 zmm (16 accumulators), each step
// broadcasting one bf16 pair of A per row against four 16-column vectors of B's pairs. Compiled
// with -mavx512f -mavx512bw -mavx512bf16 (CMakeLists.txt) and reached only through bf16_gemm
// after cpu_features() found AVX512-BF16.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/bf16_gemm.hpp"

namespace qkv::kernels::cpu {
namespace {

std::int32_t pair_at(const std::uint16_t* a) {
  std::int32_t word;
  std::memcpy(&word, a, 4);
  return word;
}

// C rows [0, 4) x vectors [0, V) of this strip (16 columns each) over `pairs` pair rows of B,
// from 0 or (accumulate) from C.
template <int V>
void strip(std::int64_t pairs, const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b,
           std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  __m512 acc[4][V];
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < V; ++v) {
      acc[r][v] = accumulate ? _mm512_loadu_ps(c + r * ldc + v * kUnitCols) : _mm512_setzero_ps();
    }
  }
  for (std::int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[V];
    for (int v = 0; v < V; ++v) {
      bv[v] = (__m512bh)_mm512_loadu_si512(b + p * ldb + v * kUnitCols * 2);
    }
    for (int r = 0; r < 4; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair_at(a + r * lda + 2 * p));
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(c + r * ldc + v * kUnitCols, acc[r][v]);
  }
}

}  // namespace

void bf16_gemm_avx512(std::int64_t m_tiles, std::int64_t n_tiles, std::int64_t k_chunks,
                      const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, float* c,
                      std::int64_t ldc, bool accumulate) {
  const std::int64_t pairs = k_chunks * kUnitDepth / 2;
  const std::int64_t ldb = n_tiles * kUnitCols * 2;
  for (std::int64_t m = 0; m < m_tiles * kUnitRows; m += 4) {
    std::int64_t n = 0;
    for (; n + 4 <= n_tiles; n += 4) {
      strip<4>(pairs, a + m * lda, lda, b + n * kUnitCols * 2, ldb, c + m * ldc + n * kUnitCols,
               ldc, accumulate);
    }
    for (; n < n_tiles; ++n) {
      strip<1>(pairs, a + m * lda, lda, b + n * kUnitCols * 2, ldb, c + m * ldc + n * kUnitCols,
               ldc, accumulate);
    }
  }
}

}  // namespace qkv::kernels::cpu
