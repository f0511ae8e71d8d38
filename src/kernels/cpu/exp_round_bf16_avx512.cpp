// exp_round_bf16.hpp's row on AVX512-BF16. Compiled with -mavx512f -mavx512bf16
// -ffp-contract=off: the product scale * s must be rounded before the subtraction (see
// tile-inl.h's scale_rows), and g++ contracts an intrinsic multiply followed by a subtract into
// one FMA otherwise (it did in a test of -O3 -std=c++20).
#include <immintrin.h>

#include "kernels/cpu/exp_round_bf16.hpp"

namespace qkv::kernels::cpu {

float exp_round_row_avx512bf16(const float* s, float scale, float shift, std::uint16_t* rounded,
                               std::int64_t n) {
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 vshift = _mm512_set1_ps(shift);
  const __m512 shifter = _mm512_set1_ps(12583039.0f);  // 1.5 * 2^23 + 127
  const __m512 lowest = _mm512_set1_ps(-88.0f);
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 sum = _mm512_setzero_ps();
  for (std::int64_t c = 0; c < n; c += 16) {
    __m512 x = _mm512_sub_ps(_mm512_mul_ps(vscale, _mm512_loadu_ps(s + c)), vshift);
    // exp_softmax, step for step: the clamp keeps NaN (an unordered compare is false).
    x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, lowest, _CMP_LT_OQ), lowest);
    const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), shifter);
    const __m512 k = _mm512_sub_ps(t, shifter);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    const __m512 r2 = _mm512_mul_ps(r, r);
    const __m512 c54 =
        _mm512_fmadd_ps(_mm512_set1_ps(1.6666665459e-1f), r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 c32 =
        _mm512_fmadd_ps(_mm512_set1_ps(8.3334519073e-3f), r, _mm512_set1_ps(4.1665795894e-2f));
    const __m512 c10 =
        _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    const __m512 poly = _mm512_fmadd_ps(_mm512_fmadd_ps(c10, r2, c32), r2, c54);
    const __m512 y = _mm512_fmadd_ps(poly, r2, _mm512_add_ps(r, one));
    const __m512 e =
        _mm512_mul_ps(y, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(t), 23)));
    sum = _mm512_add_ps(sum, e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rounded + c),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
  }
  return _mm512_reduce_add_ps(sum);
}

}  // namespace qkv::kernels::cpu
