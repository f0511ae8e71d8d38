// bf16_dots.hpp's VDPBF16PS path: each (row, key) one accumulator of 16 lanes over the row's
// 32-element steps, up to four rows at a time against each key's loaded vectors, rows of up to
// 128 elements held in registers for the whole run of keys. Compiled with -mavx512f -mavx512bw
// -mavx512bf16 (CMakeLists.txt) and reached only through bf16_score_dots after
// decode_bf16_path found AVX512-BF16.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/avx512_rows.hpp"
#include "kernels/cpu/bf16_dots.hpp"

namespace qkv::kernels::cpu {
namespace {

// The elements [x, x + 32) of a row of dim bf16 as VDPBF16PS takes them, zero past dim.
__m512bh step_at(const std::uint16_t* row, std::int64_t x, std::int64_t dim) {
  return (__m512bh)avx512::bf16_step(row, x, dim);
}

using avx512::lanes_of;

// v's lanes at idx as _mm512_permutexvar_ps: its zero-masked form under a full mask, the same
// instruction, since g++ 12 warns of the undefined operand inside the plain one.
__m512 permuted(__m512i idx, __m512 v) { return _mm512_maskz_permutexvar_ps(0xFFFF, idx, v); }

// The sums of the lanes of v [16], lane c holding v[c]'s, in bf16_dots.hpp's tree (i with i + 8,
// then i + 4, i + 2 and i + 1): each level adds two vectors that line up the pairs of two keys'
// partial sums, by blends and 128-bit lane shuffles for the first two levels and in-lane shuffles
// for the last two, whose sums come out with key 4 p + s in lane 4 s' + p (s' swaps 1 and 2),
// put in order by one permute at the end. Every sum adds the same two values as the tree, and
// addition commutes, so the bits are the tree's. A scratch program (16 keys' lanes in L1, AMD EPYC
// (family 25, model 17) Zen 4 VM, 2026-11-29, three runs) took 16.5 ns a call, against 22.4 for
// two-source permutes at every level (two a pair of vectors, 30 in all), bitwise the same on 1024
// keys of lanes spread over 40 binades. In bf16 decode (heads first, D 128, 2 threads, the two
// trees switched call by call in one build, two rounds), time over the permutes': Tq 16 over Hq 8
// at Tk 65536 0.98-0.99, Hq 64 over Hk 8 at 16384 0.97, Hq 32 at 4096 0.97-1.00 and at 65536
// 1.00 (bound by memory). Without any tree those shapes took 0.89-0.90 (65536: 0.99-1.01).
__m512 sums_of_16(const __m512* v) {
  __m512 r[8];  // v[2j]'s sums (i, i + 8) in lanes [0, 8), v[2j + 1]'s in [8, 16)
  for (int j = 0; j < 8; ++j) {
    const __m512 same = _mm512_mask_blend_ps(0xFF00, v[2 * j], v[2 * j + 1]);
    const __m512 other = lanes_of<_MM_SHUFFLE(1, 0, 3, 2)>(v[2 * j], v[2 * j + 1]);
    r[j] = _mm512_add_ps(same, other);
  }
  __m512 t[4];  // 128-bit lanes: keys 4m, 4m + 2, 4m + 1, 4m + 3, each its sums (i, i + 4)
  for (int m = 0; m < 4; ++m) {
    const __m512 same = _mm512_mask_blend_ps(0xF0F0, r[2 * m], r[2 * m + 1]);
    const __m512 swapped = _mm512_mask_blend_ps(0xF0F0, r[2 * m + 1], r[2 * m]);
    t[m] = _mm512_add_ps(same, lanes_of<_MM_SHUFFLE(2, 3, 0, 1)>(swapped, swapped));
  }
  __m512 u[2];  // 128-bit lane q: t[2n]'s key's sums (i, i + 2), then t[2n + 1]'s
  for (int n = 0; n < 2; ++n) {
    u[n] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * n], t[2 * n + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(t[2 * n], t[2 * n + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i in_order = _mm512_setr_epi32(0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15);
  return permuted(in_order, sums);
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
               std::int64_t n, std::int64_t dim, __m512 (*lanes)[16]) {
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
                std::int64_t ldk, std::int64_t n, std::int64_t dim, __m512 (*lanes)[16]) {
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

using RowsLanes = void (*)(const std::uint16_t* const*, std::int64_t, const std::uint16_t*,
                           std::int64_t, std::int64_t, std::int64_t, __m512 (*)[16]);

// rows_lanes for rows of `steps` steps of 32: held in registers up to 4, loaded past.
RowsLanes rows_lanes_for(std::int64_t steps) {
  switch (steps) {
    case 1:
      return rows_lanes<1>;
    case 2:
      return rows_lanes<2>;
    case 3:
      return rows_lanes<3>;
    case 4:
      return rows_lanes<4>;
    default:
      return rows_lanes<0>;
  }
}

constexpr std::int64_t kPairs = kBf16ValueKeys / 2;

// Columns [0, 32) of a row's accumulators as VPUNPCKLWD and VPUNPCKHWD pair V's columns: the
// low vector holds columns 0-3, 8-11, 16-19 and 24-27, the high one the rest, each 128-bit lane
// four columns of its eight. Indices into two vectors of 16 (columns 0-15, then 16-31), and back.
alignas(64) constexpr std::int32_t kToLow[16] = {0,  1,  2,  3,  8,  9,  10, 11,
                                                 16, 17, 18, 19, 24, 25, 26, 27};
alignas(64) constexpr std::int32_t kToHigh[16] = {4,  5,  6,  7,  12, 13, 14, 15,
                                                  20, 21, 22, 23, 28, 29, 30, 31};
alignas(64) constexpr std::int32_t kFromFirst[16] = {0, 1, 2, 3, 16, 17, 18, 19,
                                                     4, 5, 6, 7, 20, 21, 22, 23};
alignas(64) constexpr std::int32_t kFromSecond[16] = {8,  9,  10, 11, 24, 25, 26, 27,
                                                      12, 13, 14, 15, 28, 29, 30, 31};

// The most columns whose accumulators one pass over the keys holds (bf16_values_avx512): 4
// chunks of 32 columns a row, 2 vectors each, in held [kBf16DotRows][2 kHeldChunks].
constexpr std::int64_t kHeldChunks = 4;

// held[r][0, 2 NX) += the pairs' products for the rows [0, NR) and the columns [c, c + 32 NX)
// (those below dv), pairs [0, pairs): pw [rows][kPairs] P's bf16 pairs of keys (keys 2m and 2m + 1
// in pair m, zero past n), v [n, ldv] bf16 rows from column c. Each pair's two V rows are read
// as they lie and interleaved in registers (column c of keys 2m and 2m + 1 side by side, the odd
// key's zero past n): a copy into pairs through permutes first cost 24 of the 41 cycles a key of 4
// rows (D 128, V in L1, AMD EPYC (family 25, model 17) Zen 4 VM, 2026-11-29). The loads of V are
// plain where the columns fill the vector: masked 16-bit loads took 2.2x the time of the whole
// block on that CPU (bench/README.md).
template <int NR, int NX, bool kTail>
void values_block(const std::uint32_t (*pw)[kPairs], std::int64_t pairs, std::int64_t n,
                  const std::uint16_t* v, std::int64_t ldv, std::int64_t c, std::int64_t dv,
                  __m512 (*held)[2 * kHeldChunks]) {
  __m512 sum[NR][2 * NX];
  __mmask32 keep[NX];
#pragma GCC unroll 4
  for (int x = 0; x < NX; ++x) {
    const std::int64_t left = std::clamp<std::int64_t>(dv - c - 32 * x, 0, 32);
    keep[x] = static_cast<__mmask32>((std::uint64_t{1} << left) - 1);
#pragma GCC unroll 2
    for (int r = 0; r < NR; ++r) {
      sum[r][2 * x] = held[r][2 * x];
      sum[r][2 * x + 1] = held[r][2 * x + 1];
    }
  }
  for (std::int64_t m = 0; m < pairs; ++m) {
    const std::uint16_t* even = v + 2 * m * ldv + c;
    const bool odd = 2 * m + 1 < n;
    __m512bh low[NX], high[NX];
#pragma GCC unroll 4
    for (int x = 0; x < NX; ++x) {
      const std::uint16_t* at = even + 32 * x;
      const __m512i e = kTail ? _mm512_maskz_loadu_epi16(keep[x], at) : _mm512_loadu_si512(at);
      const __m512i o = !odd    ? _mm512_setzero_si512()
                        : kTail ? _mm512_maskz_loadu_epi16(keep[x], at + ldv)
                                : _mm512_loadu_si512(at + ldv);
      low[x] = (__m512bh)_mm512_unpacklo_epi16(e, o);
      high[x] = (__m512bh)_mm512_unpackhi_epi16(e, o);
    }
#pragma GCC unroll 2
    for (int r = 0; r < NR; ++r) {
      const auto pr = (__m512bh)_mm512_set1_epi32(static_cast<int>(pw[r][m]));
#pragma GCC unroll 4
      for (int x = 0; x < NX; ++x) {
        sum[r][2 * x] = _mm512_dpbf16_ps(sum[r][2 * x], pr, low[x]);
        sum[r][2 * x + 1] = _mm512_dpbf16_ps(sum[r][2 * x + 1], pr, high[x]);
      }
    }
  }
#pragma GCC unroll 4
  for (int x = 0; x < NX; ++x) {
#pragma GCC unroll 2
    for (int r = 0; r < NR; ++r) {
      held[r][2 * x] = sum[r][2 * x];
      held[r][2 * x + 1] = sum[r][2 * x + 1];
    }
  }
}

using ValuesBlock = void (*)(const std::uint32_t (*)[kPairs], std::int64_t, std::int64_t,
                             const std::uint16_t*, std::int64_t, std::int64_t, std::int64_t,
                             __m512 (*)[2 * kHeldChunks]);

// [32-column chunks - 1][rows - 1].
template <bool kTail>
constexpr ValuesBlock kBlocks[kHeldChunks][2] = {
    {values_block<1, 1, kTail>, values_block<2, 1, kTail>},
    {values_block<1, 2, kTail>, values_block<2, 2, kTail>},
    {values_block<1, 3, kTail>, values_block<2, 3, kTail>},
    {values_block<1, 4, kTail>, values_block<2, 4, kTail>}};

}  // namespace

void bf16_values_avx512(const float* const* p, std::int64_t rows, const std::uint16_t* v,
                        std::int64_t ldv, std::int64_t n, std::int64_t dv, float* const* acc) {
  const std::int64_t pairs = (n + 1) / 2;
  // P rounded (VCVTNE2PS2BF16: nearest, ties to even) in pairs of keys, zero past n.
  alignas(64) std::uint32_t pw[kBf16DotRows][kPairs];
  const auto upto = [](std::int64_t left) {  // the first `left` of 16 lanes, clamped
    return static_cast<__mmask16>((1u << std::clamp<std::int64_t>(left, 0, 16)) - 1);
  };
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < n; c += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(upto(n - c), p[r] + c);
      const __m512 hi = _mm512_maskz_loadu_ps(upto(n - c - 16), p[r] + c + 16);
      _mm512_store_si512(pw[r] + c / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
  // Up to kHeldChunks 32-column chunks of every row's accumulators, held in the order in which
  // VPUNPCKLWD / VPUNPCKHWD pair V's columns, over all the keys, two rows at a time across all
  // those columns: V is read row after row, each row whole (at D up to 128), and the next two
  // rows find the tile in cache. Read in 64-column halves for four rows at a time, each row's
  // lines out of order, V alone from memory took 1.4x the time (a scratch program: 65536 keys, 8
  // heads, 2 threads), and a decode call (Hq 32 over Hk 8, heads first, 65536 keys) 1.09-1.10x;
  // in runs of 8 or 16 pairs for all the rows, 1.05-1.11x and 1.03-1.06x the time of whole tiles
  // (the Zen 4 VM above, drivers alternating the variants call by call; bench/README.md).
  alignas(64) __m512 held[kBf16DotRows][2 * kHeldChunks];
  const __m512i to_low = _mm512_load_si512(kToLow), to_high = _mm512_load_si512(kToHigh);
  const __m512i from_first = _mm512_load_si512(kFromFirst);
  const __m512i from_second = _mm512_load_si512(kFromSecond);
  for (std::int64_t c0 = 0; c0 < dv; c0 += 32 * kHeldChunks) {
    const std::int64_t chunks = std::min(kHeldChunks, (dv - c0 + 31) / 32);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t x = 0; x < chunks; ++x) {
        const std::int64_t c = c0 + 32 * x;
        const __m512 first = _mm512_maskz_loadu_ps(upto(dv - c), acc[r] + c);
        const __m512 second = _mm512_maskz_loadu_ps(upto(dv - c - 16), acc[r] + c + 16);
        held[r][2 * x] = _mm512_permutex2var_ps(first, to_low, second);
        held[r][2 * x + 1] = _mm512_permutex2var_ps(first, to_high, second);
      }
    }
    const bool tail = c0 + 32 * chunks > dv;
    for (std::int64_t r0 = 0; r0 < rows; r0 += 2) {
      const std::int64_t nr = std::min<std::int64_t>(2, rows - r0);
      (tail ? kBlocks<true> : kBlocks<false>)[chunks - 1][nr - 1](pw + r0, pairs, n, v, ldv, c0, dv,
                                                                  held + r0);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t x = 0; x < chunks; ++x) {
        const std::int64_t c = c0 + 32 * x;
        const __m512 lo = held[r][2 * x], hi = held[r][2 * x + 1];
        _mm512_mask_storeu_ps(acc[r] + c, upto(dv - c), _mm512_permutex2var_ps(lo, from_first, hi));
        _mm512_mask_storeu_ps(acc[r] + c + 16, upto(dv - c - 16),
                              _mm512_permutex2var_ps(lo, from_second, hi));
      }
    }
  }
}

void bf16_score_dots_avx512(const std::uint16_t* const* q, std::int64_t rows,
                            const std::uint16_t* k, std::int64_t ldk, std::int64_t n,
                            std::int64_t dim, float scale, float* const* s) {
  // Runs of up to kTreeKeys keys for up to kTreeRows rows.
  constexpr std::int64_t kTreeRows = 8, kTreeKeys = 16;
  __m512 lanes[kTreeRows][kTreeKeys];
  // From 4 keys the tree's ~45 operations undercut a sum of lanes a key: a driver timing this
  // function both ways, K in L1, D 128, alternated, AMD EPYC (family 25, model 17) Zen 4 VM,
  // 2026-11-29 (a build running beside it), tree over sums, 1 and 4 rows: 3 keys 0.98 / 1.02, 4
  // keys 0.69 / 0.89, 5 keys 0.66 / 0.74, 6 to 9 keys 0.44-0.63.
  constexpr std::int64_t kMinTree = 4;
  const __m512 times = _mm512_set1_ps(scale);
  const RowsLanes lanes_for = rows_lanes_for((dim + 31) / 32);
  for (std::int64_t r0 = 0; r0 < rows; r0 += kTreeRows) {
    const std::int64_t m = std::min(kTreeRows, rows - r0);
    for (std::int64_t c0 = 0; c0 < n; c0 += kTreeKeys) {
      const std::int64_t keys = std::min(kTreeKeys, n - c0);
      const std::uint16_t* run = k + c0 * ldk;
      lanes_for(q + r0, m, run, ldk, keys, dim, lanes);
      for (std::int64_t r = 0; r < m; ++r) {
        float* out = s[r0 + r] + c0;
        if (keys < kMinTree) {
          for (std::int64_t c = 0; c < keys; ++c) out[c] = sum_of_lanes(lanes[r][c]) * scale;
          continue;
        }
        for (std::int64_t c = keys; c < kTreeKeys; ++c) lanes[r][c] = _mm512_setzero_ps();
        const auto first = static_cast<__mmask16>((1u << keys) - 1);
        _mm512_mask_storeu_ps(out, first, _mm512_mul_ps(sums_of_16(lanes[r]), times));
      }
    }
  }
}

}  // namespace qkv::kernels::cpu
