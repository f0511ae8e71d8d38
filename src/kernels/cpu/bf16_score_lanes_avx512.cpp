// bf16_dots.hpp's VDPBF16PS scores for many query rows a call, each row in a lane of its own: the
// same bits as bf16_dots_avx512.cpp's tree, with no horizontal sums. There, each (row, key) is one
// vector of 16 lanes (lane l adding the products of the pairs l, l + 16, l + 32, ... of the row)
// and 16 keys' vectors are then summed across their lanes in a tree of shuffles. Here the vector
// holds the query rows: lane r of chain l adds the same products of row r in the same order, one
// VDPBF16PS a step with the key's pair broadcast from memory, and the tree is 15 plain adds of
// whole vectors, lane l's chain with lane l + 8's, then + 4, + 2 and + 1. Each lane of VDPBF16PS
// computes the same function of its operands whatever its position, so every score has the tree's
// bits. Compiled with -mavx512f -mavx512bw -mavx512bf16 (CMakeLists.txt) and reached
// only through bf16_score_dots after decode_bf16_path found AVX512-BF16.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx512_rows.hpp"
#include "kernels/cpu/bf16_dots.hpp"

namespace qkv::kernels::cpu {
namespace {

using avx512::bf16_step;
using avx512::transpose16;

// The most 32-element steps a row of this path has (dim up to 128).
constexpr int kMaxSteps = kBf16LaneSteps;

// Pair p of the rows: lane r holds row r's elements 2 p and 2 p + 1 (zero past dim, and in the
// lanes past the call's rows), for the pairs of NV steps.
struct QueryLanes {
  alignas(64) float pair[16 * kMaxSteps][16];
  QueryLanes(const std::uint16_t* const* q, std::int64_t rows, std::int64_t dim, int steps) {
    for (int x = 0; x < steps; ++x) {
      __m512 m[16];
      for (std::int64_t r = 0; r < 16; ++r) {
        m[r] = r < rows ? _mm512_castsi512_ps(bf16_step(q[r], 32 * x, dim)) : _mm512_setzero_ps();
      }
      transpose16(m);
      for (int j = 0; j < 16; ++j) _mm512_store_ps(pair[16 * x + j], m[j]);
    }
  }
};

// Pair p (elements 2 p and 2 p + 1) of a key of dim elements, zero past dim: read as it lies where
// whole, and never past the row's end.
std::uint32_t key_pair(const std::uint16_t* key, std::int64_t p, std::int64_t dim) {
  if (2 * p + 2 <= dim) {
    std::uint32_t bits;
    std::memcpy(&bits, key + 2 * p, sizeof bits);
    return bits;
  }
  return 2 * p < dim ? key[2 * p] : 0u;
}

// acc + the products of the rows' pairs q (lanes) with a key's pair k broadcast to every lane.
__m512 dot(__m512 acc, __m512 q, std::uint32_t k) {
  return _mm512_dpbf16_ps(acc, (__m512bh)q, (__m512bh)_mm512_set1_epi32(static_cast<int>(k)));
}

// The four chains' vectors of the tree's second level: t[g] = (a_g + a_(g+8)) + (a_(g+4) +
// a_(g+12)), chain a_l holding the pairs l, l + 16, ... of NV steps.
constexpr int kChains[4][4] = {{0, 8, 4, 12}, {1, 9, 5, 13}, {2, 10, 6, 14}, {3, 11, 7, 15}};

// level[c] <- t_G of the rows against key c (k + c ldk), keys [0, n): its 4 NV query vectors held
// in registers across the keys, each key's pairs broadcast from memory at fixed offsets. kWhole:
// dim is 32 NV, every pair read as it lies.
template <int NV, bool kWhole, int G>
void second_level(const QueryLanes& ql, const std::uint16_t* k, std::int64_t ldk, std::int64_t n,
                  std::int64_t dim, float (*level)[16]) {
  __m512 held[4][NV];
  for (int j = 0; j < 4; ++j) {
    for (int x = 0; x < NV; ++x) held[j][x] = _mm512_load_ps(ql.pair[kChains[G][j] + 16 * x]);
  }
  for (std::int64_t c = 0; c < n; ++c) {
    const std::uint16_t* key = k + c * ldk;
    __m512 a[4];
    for (int j = 0; j < 4; ++j) {
      a[j] = _mm512_setzero_ps();
      for (int x = 0; x < NV; ++x) {
        const std::int64_t p = kChains[G][j] + 16 * x;
        std::uint32_t bits;
        if constexpr (kWhole) {
          std::memcpy(&bits, key + 2 * p, sizeof bits);
        } else {
          bits = key_pair(key, p, dim);
        }
        a[j] = dot(a[j], held[j][x], bits);
      }
    }
    _mm512_store_ps(level[c], _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
  }
}

// s[r][c] <- scale times the score of row r against key c (k + c ldk), for the rows [0, rows) and
// the keys [0, n): 16 keys at a time, the four groups of the second level one after the other
// (the keys and the levels stay in L1; a tile's 64 keys at once spilled it), then the last two
// levels, and the keys' vectors turned into the rows' runs.
template <int NV, bool kWhole>
void lane_scores(const QueryLanes& ql, std::int64_t rows, const std::uint16_t* k, std::int64_t ldk,
                 std::int64_t n, std::int64_t dim, float scale, float* const* s) {
  alignas(64) float level[4][16][16];
  const __m512 times = _mm512_set1_ps(scale);
  for (std::int64_t c0 = 0; c0 < n; c0 += 16) {
    const std::int64_t m = std::min<std::int64_t>(16, n - c0);
    const std::uint16_t* run = k + c0 * ldk;
    second_level<NV, kWhole, 0>(ql, run, ldk, m, dim, level[0]);
    second_level<NV, kWhole, 1>(ql, run, ldk, m, dim, level[1]);
    second_level<NV, kWhole, 2>(ql, run, ldk, m, dim, level[2]);
    second_level<NV, kWhole, 3>(ql, run, ldk, m, dim, level[3]);
    __m512 t[16];
    for (std::int64_t c = 0; c < 16; ++c) {
      if (c < m) {
        const __m512 u0 = _mm512_add_ps(_mm512_load_ps(level[0][c]), _mm512_load_ps(level[2][c]));
        const __m512 u1 = _mm512_add_ps(_mm512_load_ps(level[1][c]), _mm512_load_ps(level[3][c]));
        t[c] = _mm512_add_ps(u0, u1);
      } else {
        t[c] = _mm512_setzero_ps();
      }
    }
    transpose16(t);
    const auto first_m = static_cast<__mmask16>((1u << m) - 1);
    for (std::int64_t r = 0; r < rows; ++r) {
      _mm512_mask_storeu_ps(s[r] + c0, first_m, _mm512_mul_ps(t[r], times));
    }
  }
}

using LaneScores = void (*)(const QueryLanes&, std::int64_t, const std::uint16_t*, std::int64_t,
                            std::int64_t, std::int64_t, float, float* const*);

LaneScores lane_scores_for(int steps, bool whole) {
  switch (steps) {
    case 1:
      return whole ? lane_scores<1, true> : lane_scores<1, false>;
    case 2:
      return whole ? lane_scores<2, true> : lane_scores<2, false>;
    case 3:
      return whole ? lane_scores<3, true> : lane_scores<3, false>;
    default:
      return whole ? lane_scores<4, true> : lane_scores<4, false>;
  }
}

}  // namespace

void bf16_score_lanes_avx512(const std::uint16_t* const* q, std::int64_t rows,
                             const std::uint16_t* k, std::int64_t ldk, std::int64_t n,
                             std::int64_t dim, float scale, float* const* s) {
  const int steps = static_cast<int>((dim + 31) / 32);
  const QueryLanes ql(q, rows, dim, steps);
  lane_scores_for(steps, dim == 32 * steps)(ql, rows, k, ldk, n, dim, scale, s);
}

}  // namespace qkv::kernels::cpu
