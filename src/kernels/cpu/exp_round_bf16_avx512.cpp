// exp_round_bf16.hpp's functions on AVX512-BF16. Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512bf16 -ffp-contract=off: the product scale * s must be rounded before the subtraction (see
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
    // exp_for_bf16, step for step. Its clamp (a compare and a select, which keep a NaN) is one
    // MAXPS here: x86 returns the second operand when either is NaN, so x's NaN stays; Highway
    // cannot promise that on every target, this file runs only on x86. 128 rows of 256: 7.67-7.72
    // -> 7.46-7.47 us, one core of the Intel Xeon (AMX), the same sums.
    x = _mm512_max_ps(lowest, x);
    const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), shifter);
    const __m512 k = _mm512_sub_ps(t, shifter);
    const __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693147180559945309f), x);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kExpBf16C4), r, _mm512_set1_ps(kExpBf16C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpBf16C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpBf16C1));
    const __m512 y = _mm512_fmadd_ps(p, r, one);
    const __m512 e =
        _mm512_mul_ps(y, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(t), 23)));
    sum = _mm512_add_ps(sum, e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rounded + c),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
  }
  return _mm512_reduce_add_ps(sum);
}

void round_run_avx512bf16(const float* x, std::uint16_t* dst, std::int64_t n) {
  std::int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(x + c))));
  }
  if (c < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - c)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(tail, x + c));
    _mm256_mask_storeu_epi16(dst + c, tail, reinterpret_cast<__m256i>(v));
  }
}

void round_pairs_avx512bf16(const float* even, const float* odd, std::uint16_t* dst,
                            std::int64_t n) {
  // VCVTNE2PS2BF16 puts the even row's 16 values in the low half and the odd row's in the high;
  // the permutation interleaves them: lane 2 j <- j, lane 2 j + 1 <- 16 + j.
  alignas(64) static constexpr std::uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i order = _mm512_load_si512(kInterleave);
  for (std::int64_t c = 0; c < n; c += 16) {
    const std::int64_t left = n - c < 16 ? n - c : 16;
    const __mmask16 lanes = static_cast<__mmask16>((1u << left) - 1);
    const __m512 e = _mm512_maskz_loadu_ps(lanes, even + c);
    const __m512 o = odd != nullptr ? _mm512_maskz_loadu_ps(lanes, odd + c) : _mm512_setzero_ps();
    const __m512i pairs =
        _mm512_permutexvar_epi16(order, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(o, e)));
    const __mmask32 words =
        left == 16 ? ~__mmask32{0} : static_cast<__mmask32>((1ull << (2 * left)) - 1);
    _mm512_mask_storeu_epi16(dst + 2 * c, words, pairs);
  }
}

}  // namespace qkv::kernels::cpu
