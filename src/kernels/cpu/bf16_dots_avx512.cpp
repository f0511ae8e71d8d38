// bf16_dots.hpp's VDPBF16PS path: each (row, key) one accumulator of 16 lanes over the row's
// 32-element steps, up to four rows at a time against each key's loaded vectors, rows of up to
// 128 elements held in registers for the whole run of keys. Compiled with -mavx512f -mavx512bw
// -mavx512bf16 (CMakeLists.txt) and reached only through bf16_score_dots after
// decode_bf16_path found AVX512-BF16.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/bf16_dots.hpp"

namespace qkv::kernels::cpu {
namespace {

// The elements [x, x + 32) of a row of dim bf16, zero past dim.
__m512bh step_at(const std::uint16_t* row, std::int64_t x, std::int64_t dim) {
  if (x + 32 <= dim) return (__m512bh)_mm512_loadu_si512(row + x);
  const auto keep = static_cast<__mmask32>((std::uint64_t{1} << (dim - x)) - 1);
  return (__m512bh)_mm512_maskz_loadu_epi16(keep, row + x);
}

// Lanes [0, 16) from a, [16, 32) from b, at idx.
__m512 pick(__m512 a, const std::int32_t* idx, __m512 b) {
  return _mm512_permutex2var_ps(a, _mm512_loadu_si512(idx), b);
}

// The sums of the lanes of v [16], lane c holding v[c]'s, in bf16_dots.hpp's tree (i with i + 8,
// then i + 4, i + 2 and i + 1, the lower lane the first operand): each level adds two vectors of
// pairs gathered from two, 15 adds and 30 shuffles for the 16 sums.
// (Permutes throughout: g++ 12 warns of the undefined operand inside _mm512_shuffle_f32x4.)
__m512 sums_of_16(const __m512* v) {
  alignas(64) static constexpr std::int32_t kLow[16] = {0,  1,  2,  3,  4,  5,  6,  7,
                                                        16, 17, 18, 19, 20, 21, 22, 23};
  alignas(64) static constexpr std::int32_t kHigh[16] = {8,  9,  10, 11, 12, 13, 14, 15,
                                                         24, 25, 26, 27, 28, 29, 30, 31};
  __m512 r[8];  // the pairs (i, i + 8) of v[2j] in lanes [0, 8), of v[2j + 1] in [8, 16)
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_add_ps(pick(v[2 * j], kLow, v[2 * j + 1]), pick(v[2 * j], kHigh, v[2 * j + 1]));
  }
  alignas(64) static constexpr std::int32_t kHalvesLow[16] = {0,  1,  2,  3,  8,  9,  10, 11,
                                                              16, 17, 18, 19, 24, 25, 26, 27};
  alignas(64) static constexpr std::int32_t kHalvesHigh[16] = {4,  5,  6,  7,  12, 13, 14, 15,
                                                               20, 21, 22, 23, 28, 29, 30, 31};
  __m512 t[4];  // the pairs (i, i + 4): vectors 4m .. 4m + 3 in 4 lanes each
  for (int m = 0; m < 4; ++m) {
    t[m] = _mm512_add_ps(pick(r[2 * m], kHalvesLow, r[2 * m + 1]),
                         pick(r[2 * m], kHalvesHigh, r[2 * m + 1]));
  }
  alignas(64) static constexpr std::int32_t kQuartersLow[16] = {0,  1,  4,  5,  8,  9,  12, 13,
                                                                16, 17, 20, 21, 24, 25, 28, 29};
  alignas(64) static constexpr std::int32_t kQuartersHigh[16] = {2,  3,  6,  7,  10, 11, 14, 15,
                                                                 18, 19, 22, 23, 26, 27, 30, 31};
  __m512 u[2];  // the pairs (i, i + 2): vectors 8n .. 8n + 7 in 2 lanes each
  for (int n = 0; n < 2; ++n) {
    u[n] = _mm512_add_ps(pick(t[2 * n], kQuartersLow, t[2 * n + 1]),
                         pick(t[2 * n], kQuartersHigh, t[2 * n + 1]));
  }
  alignas(64) static constexpr std::int32_t kEven[16] = {0,  2,  4,  6,  8,  10, 12, 14,
                                                         16, 18, 20, 22, 24, 26, 28, 30};
  alignas(64) static constexpr std::int32_t kOdd[16] = {1,  3,  5,  7,  9,  11, 13, 15,
                                                        17, 19, 21, 23, 25, 27, 29, 31};
  return _mm512_add_ps(pick(u[0], kEven, u[1]), pick(u[0], kOdd, u[1]));
}

// The sum of v's lanes in the same tree as sums_of_16, for a few keys.
float sum_of_lanes(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  for (int width = 8; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) lanes[i] = lanes[i] + lanes[i + width];
  }
  return lanes[0];
}

// lanes[r][c] <- the 16 lanes of row q[r] against key c (k + c ldk), rows [0, R), keys [0, n):
// each one accumulator over the row's NV steps of 32 (the last zero-padded past dim). NV > 0:
// the rows' steps held in registers for the run; 0: loaded for every key (rows past 128, where
// four rows' steps would not fit the registers beside their accumulators). Held over loaded at D
// 128 (runs of 16 keys in L1, the driver of kMinTree below, two runs): 1 row 0.81-0.83, 2 rows
// 0.63, 4 rows 0.67-0.79, 8 rows 0.59-0.73.
template <int NV, int R>
void run_lanes(const std::uint16_t* const* q, const std::uint16_t* k, std::int64_t ldk,
               std::int64_t n, std::int64_t dim, __m512 (*lanes)[kBf16DotKeys]) {
  if constexpr (NV > 0) {
    __m512bh held[R][NV];
    for (int r = 0; r < R; ++r) {
      for (int x = 0; x < NV; ++x) held[r][x] = step_at(q[r], 32 * x, dim);
    }
    for (std::int64_t c = 0; c < n; ++c) {
      const std::uint16_t* key = k + c * ldk;
      __m512 acc[R];
      for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
      for (int x = 0; x < NV; ++x) {
        const __m512bh kx = step_at(key, 32 * x, dim);
        for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], held[r][x], kx);
      }
      for (int r = 0; r < R; ++r) lanes[r][c] = acc[r];
    }
  } else {
    for (std::int64_t c = 0; c < n; ++c) {
      const std::uint16_t* key = k + c * ldk;
      __m512 acc[R];
      for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
      for (std::int64_t x = 0; x < dim; x += 32) {
        const __m512bh kx = step_at(key, x, dim);
        for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], step_at(q[r], x, dim), kx);
      }
      for (int r = 0; r < R; ++r) lanes[r][c] = acc[r];
    }
  }
}

template <int NV>
void rows_lanes(const std::uint16_t* const* q, std::int64_t rows, const std::uint16_t* k,
                std::int64_t ldk, std::int64_t n, std::int64_t dim, __m512 (*lanes)[kBf16DotKeys]) {
  std::int64_t r = 0;
  for (; r + 4 <= rows; r += 4) run_lanes<NV, 4>(q + r, k, ldk, n, dim, lanes + r);
  switch (rows - r) {
    case 3:
      run_lanes<NV, 3>(q + r, k, ldk, n, dim, lanes + r);
      break;
    case 2:
      run_lanes<NV, 2>(q + r, k, ldk, n, dim, lanes + r);
      break;
    case 1:
      run_lanes<NV, 1>(q + r, k, ldk, n, dim, lanes + r);
      break;
    default:
      break;
  }
}

constexpr std::int64_t kPairs = kBf16ValueKeys / 2;

// The acc rows [0, NR) x 16-column chunks [x0, x0 + NX) += the pairs' products: pw [rows][kPairs]
// P's bf16 pairs of keys, vp [pairs][chunks][32] V's, interleaved (column c of keys 2m and 2m + 1
// side by side); the last chunk keeps columns below dv.
template <int NR, int NX>
void values_block(const std::uint32_t (*pw)[kPairs], std::int64_t pairs, const std::uint16_t* vp,
                  std::int64_t chunks, std::int64_t x0, std::int64_t dv, float* const* acc) {
  __m512 sum[NR][NX];
  __mmask16 keep[NX];
  for (int x = 0; x < NX; ++x) {
    const std::int64_t left = dv - 16 * (x0 + x);
    keep[x] = left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    for (int r = 0; r < NR; ++r) sum[r][x] = _mm512_maskz_loadu_ps(keep[x], acc[r] + 16 * (x0 + x));
  }
  for (std::int64_t m = 0; m < pairs; ++m) {
    __m512bh vx[NX];
    for (int x = 0; x < NX; ++x) {
      vx[x] = (__m512bh)_mm512_loadu_si512(vp + (m * chunks + x0 + x) * 32);
    }
    for (int r = 0; r < NR; ++r) {
      const auto pr = (__m512bh)_mm512_set1_epi32(static_cast<int>(pw[r][m]));
      for (int x = 0; x < NX; ++x) sum[r][x] = _mm512_dpbf16_ps(sum[r][x], pr, vx[x]);
    }
  }
  for (int x = 0; x < NX; ++x) {
    for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(acc[r] + 16 * (x0 + x), keep[x], sum[r][x]);
  }
}

using ValuesBlock = void (*)(const std::uint32_t (*)[kPairs], std::int64_t, const std::uint16_t*,
                             std::int64_t, std::int64_t, std::int64_t, float* const*);

template <int NR>
constexpr ValuesBlock kBlocksOf[4] = {values_block<NR, 1>, values_block<NR, 2>, values_block<NR, 3>,
                                      values_block<NR, 4>};
constexpr const ValuesBlock* kBlocks[4] = {kBlocksOf<1>, kBlocksOf<2>, kBlocksOf<3>, kBlocksOf<4>};

}  // namespace

void bf16_values_avx512(const float* const* p, std::int64_t rows, const std::uint16_t* v,
                        std::int64_t ldv, std::int64_t n, std::int64_t dv, float* const* acc) {
  const std::int64_t pairs = (n + 1) / 2;
  // P rounded (VCVTNE2PS2BF16: nearest, ties to even) in pairs of keys, zero past n.
  alignas(64) std::uint32_t pw[kBf16DotRows][kPairs];
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < n; c += 32) {
      const auto upto = [&](std::int64_t from) {
        const std::int64_t left = std::clamp<std::int64_t>(n - from, 0, 16);
        return static_cast<__mmask16>((1u << left) - 1);
      };
      const __m512 lo = _mm512_maskz_loadu_ps(upto(c), p[r] + c);
      const __m512 hi = _mm512_maskz_loadu_ps(upto(c + 16), p[r] + c + 16);
      _mm512_store_si512(pw[r] + c / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
  // V's rows in pairs, each 16 columns of keys 2m and 2m + 1 interleaved, zero past dv and n.
  const std::int64_t chunks = (dv + 15) / 16;
  thread_local std::vector<std::uint16_t> interleaved;
  interleaved.resize(static_cast<std::size_t>(pairs * chunks * 32));
  std::uint16_t* vp = interleaved.data();
  alignas(64) static constexpr std::uint16_t kInterleave[32] = {
      0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i order = _mm512_load_si512(kInterleave);
  for (std::int64_t m = 0; m < pairs; ++m) {
    const std::uint16_t* even = v + 2 * m * ldv;
    const std::uint16_t* odd = 2 * m + 1 < n ? even + ldv : nullptr;
    for (std::int64_t x = 0; x < chunks; ++x) {
      const std::int64_t left = std::min<std::int64_t>(dv - 16 * x, 16);
      const auto keep = static_cast<__mmask32>((1u << left) - 1);
      const __m512i lo = _mm512_maskz_loadu_epi16(keep, even + 16 * x);
      const __m512i hi =
          odd != nullptr ? _mm512_maskz_loadu_epi16(keep, odd + 16 * x) : _mm512_setzero_si512();
      _mm512_storeu_si512(vp + (m * chunks + x) * 32, _mm512_permutex2var_epi16(lo, order, hi));
    }
  }
  // Blocks of up to 4 rows by 4 chunks (16 accumulators).
  for (std::int64_t x0 = 0; x0 < chunks; x0 += 4) {
    const std::int64_t nx = std::min<std::int64_t>(4, chunks - x0);
    for (std::int64_t r0 = 0; r0 < rows; r0 += 4) {
      const std::int64_t nr = std::min<std::int64_t>(4, rows - r0);
      kBlocks[nr - 1][nx - 1](pw + r0, pairs, vp, chunks, x0, dv, acc + r0);
    }
  }
}

void bf16_score_dots_avx512(const std::uint16_t* const* q, std::int64_t rows,
                            const std::uint16_t* k, std::int64_t ldk, std::int64_t n,
                            std::int64_t dim, float scale, float* const* s) {
  __m512 lanes[kBf16DotRows][kBf16DotKeys];
  switch ((dim + 31) / 32) {
    case 1:
      rows_lanes<1>(q, rows, k, ldk, n, dim, lanes);
      break;
    case 2:
      rows_lanes<2>(q, rows, k, ldk, n, dim, lanes);
      break;
    case 3:
      rows_lanes<3>(q, rows, k, ldk, n, dim, lanes);
      break;
    case 4:
      rows_lanes<4>(q, rows, k, ldk, n, dim, lanes);
      break;
    default:
      rows_lanes<0>(q, rows, k, ldk, n, dim, lanes);
      break;
  }
  // From 4 keys the tree's ~45 operations undercut a sum of lanes a key: a driver timing this
  // function both ways, K in L1, D 128, alternated, AMD EPYC (family 25, model 17) Zen 4 VM,
  // 2026-11-29 (a build running beside it), tree over sums, 1 and 4 rows: 3 keys 0.98 / 1.02, 4
  // keys 0.69 / 0.89, 5 keys 0.66 / 0.74, 6 to 9 keys 0.44-0.63.
  constexpr std::int64_t kMinTree = 4;
  const __m512 times = _mm512_set1_ps(scale);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (n < kMinTree) {
      for (std::int64_t c = 0; c < n; ++c) s[r][c] = sum_of_lanes(lanes[r][c]) * scale;
      continue;
    }
    for (std::int64_t c = n; c < kBf16DotKeys; ++c) lanes[r][c] = _mm512_setzero_ps();
    const auto first_n = static_cast<__mmask16>((1u << n) - 1);
    _mm512_mask_storeu_ps(s[r], first_n, _mm512_mul_ps(sums_of_16(lanes[r]), times));
  }
}

}  // namespace qkv::kernels::cpu
