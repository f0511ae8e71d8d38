// The VDPBF16PS peak: independent chains of bf16 dot products into f32 (each instruction: 16 lanes
// x 2 products x 2 FLOPs). Compiled with -mavx512f -mavx512bf16 (bench/CMakeLists.txt) and
// called only where qkv::matrix_paths() lists avx512-bf16.
#include <immintrin.h>

#include <cstdint>

#include "qkv_bench/bf16_peak.hpp"

namespace qkv::bench {

double vdpbf16ps_chains(std::int64_t iterations, float* sink) {
  // Zen 4/5 and Intel since Cooper Lake issue VDPBF16PS on two pipes with 5-6 cycles of latency:
  // 12 chains keep both busy, as the f32 FMA chains do. a = b = 2^-10 in every bf16: each step
  // adds 2^-19 to a lane, 2^26 steps reach 128, far from overflow.
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3a80);
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3a80);
  __m512 c[kBf16Chains];
  for (int i = 0; i < kBf16Chains; ++i) c[i] = _mm512_setzero_ps();
  for (std::int64_t n = 0; n < iterations; ++n) {
    for (int i = 0; i < kBf16Chains; ++i) c[i] = _mm512_dpbf16_ps(c[i], a, b);
  }
  __m512 sum = c[0];
  for (int i = 1; i < kBf16Chains; ++i) sum = _mm512_add_ps(sum, c[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (const float x : lanes) total += x;
  *sink = total;
  return 64.0 * static_cast<double>(iterations) * kBf16Chains;
}

}  // namespace qkv::bench
