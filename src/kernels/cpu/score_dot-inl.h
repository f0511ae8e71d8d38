// The dot products of decode shapes' scores (TileTraits::decode_shape): score_dot for
// one query row and one key, score_dots for one query row and a run of keys with the same bits.
// Per-target include guard.
#if defined(QKV_KERNELSCPU_SCORE_DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELSCPU_SCORE_DOT_INL_H_
#undef QKV_KERNELSCPU_SCORE_DOT_INL_H_
#else
#define QKV_KERNELSCPU_SCORE_DOT_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/cpu/gemm-inl.h"
#include "kernels/cpu/load_as-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// q [dim] . k [dim] over dim's whole vectors, lane by lane: four vector accumulators (the FMA
// chain of one product is dim / (4 L) long), added as (acc0 + acc1) + (acc2 + acc3).
template <class T, class E>
HWY_INLINE hn::Vec<hn::ScalableTag<T>> score_lanes(const T* HWY_RESTRICT q, const E* HWY_RESTRICT k,
                                                   std::int64_t dim) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d), acc2 = hn::Zero(d), acc3 = hn::Zero(d);
  std::int64_t x = 0;
  for (; x + 4 * L <= dim; x += 4 * L) {
    acc0 = hn::MulAdd(hn::LoadU(d, q + x), load_as(d, k + x), acc0);
    acc1 = hn::MulAdd(hn::LoadU(d, q + x + L), load_as(d, k + x + L), acc1);
    acc2 = hn::MulAdd(hn::LoadU(d, q + x + 2 * L), load_as(d, k + x + 2 * L), acc2);
    acc3 = hn::MulAdd(hn::LoadU(d, q + x + 3 * L), load_as(d, k + x + 3 * L), acc3);
  }
  for (; x + L <= dim; x += L) acc0 = hn::MulAdd(hn::LoadU(d, q + x), load_as(d, k + x), acc0);
  return hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3));
}

// sum + q [dim] . k [dim] over the elements past dim's whole vectors, one after another.
template <class T, class E>
HWY_INLINE T score_tail(const T* HWY_RESTRICT q, const E* HWY_RESTRICT k, std::int64_t dim, T sum) {
  const auto L = static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  for (std::int64_t x = dim / L * L; x < dim; ++x) sum = mul_add(q[x], value_as<T>(k[x]), sum);
  return sum;
}

// q . k over dim elements: score_lanes, the sum of its lanes (SumOfLanes), then score_tail. The
// split-keys forward and the backward's tiles of decode shapes both take their scores from here or
// score_dots, so that the backward recomputes bitwise the scores the forward's lse came from: with
// different summation orders, scores of 1e8 in f32 (an ulp of 8) gave the backward P = exp(s -
// lse) far above 1. k may be stored as bf16 or f16 (E, load_as-inl.h): the same arithmetic on the
// same f32 values, so a KV cache read in place gives the bits of the cache converted first.
// Inlined: a translator step's decode call (q [32, 1, 4, 32], 15 keys, 1920 scores) took 19.6-20.0
// us with a call per score and 19.2-19.5 without (one thread, AMD EPYC Zen 5 VM, 2026-11-28).
template <class T, class E>
HWY_INLINE T score_dot(const T* HWY_RESTRICT q, const E* HWY_RESTRICT k, std::int64_t dim) {
  const hn::ScalableTag<T> d;
  return score_tail(q, k, dim, hn::GetLane(hn::SumOfLanes(d, score_lanes(q, k, dim))));
}

// The most query rows one score_dot_rows call takes.
inline constexpr std::int64_t kDotRows = 8;

// score_lanes for the R query rows q [R] against one key: K's vectors loaded (and converted from
// E) once for all R rows, each row's four accumulators taking score_lanes' operations in its order,
// so each lanes[r] holds score_lanes(q[r], k, dim)'s bits.
template <int R, class T, class E>
HWY_INLINE void score_lanes_rows(const T* const* q, const E* HWY_RESTRICT k, std::int64_t dim,
                                 hn::Vec<hn::ScalableTag<T>>* lanes) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  hn::Vec<hn::ScalableTag<T>> acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int u = 0; u < 4; ++u) acc[r][u] = hn::Zero(d);
  }
  std::int64_t x = 0;
  for (; x + 4 * L <= dim; x += 4 * L) {
    const auto k0 = load_as(d, k + x), k1 = load_as(d, k + x + L), k2 = load_as(d, k + x + 2 * L),
               k3 = load_as(d, k + x + 3 * L);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = hn::MulAdd(hn::LoadU(d, q[r] + x), k0, acc[r][0]);
      acc[r][1] = hn::MulAdd(hn::LoadU(d, q[r] + x + L), k1, acc[r][1]);
      acc[r][2] = hn::MulAdd(hn::LoadU(d, q[r] + x + 2 * L), k2, acc[r][2]);
      acc[r][3] = hn::MulAdd(hn::LoadU(d, q[r] + x + 3 * L), k3, acc[r][3]);
    }
  }
  for (; x + L <= dim; x += L) {
    const auto kx = load_as(d, k + x);
    for (int r = 0; r < R; ++r) acc[r][0] = hn::MulAdd(hn::LoadU(d, q[r] + x), kx, acc[r][0]);
  }
  for (int r = 0; r < R; ++r) {
    lanes[r] = hn::Add(hn::Add(acc[r][0], acc[r][1]), hn::Add(acc[r][2], acc[r][3]));
  }
}

#if !HWY_HAVE_SCALABLE
// score_lanes_rows for the m rows q [m], m in [1, 4], into lanes [m].
template <class T, class E>
HWY_INLINE void score_lanes_upto4(std::int64_t m, const T* const* q, const E* HWY_RESTRICT k,
                                  std::int64_t dim, hn::Vec<hn::ScalableTag<T>>* lanes) {
  switch (m) {
    case 4:
      score_lanes_rows<4>(q, k, dim, lanes);
      break;
    case 3:
      score_lanes_rows<3>(q, k, dim, lanes);
      break;
    case 2:
      score_lanes_rows<2>(q, k, dim, lanes);
      break;
    default:
      score_lanes_rows<1>(q, k, dim, lanes);
      break;
  }
}
#endif

// s [n] <- score_dot(q[r], k, dim) for the query rows r in [0, n), n at most kDotRows, bitwise:
// the rows of a GQA group (and a decode call's few queries) share each key's row, so it is loaded
// and converted once for up to four of them instead of once each. Decode from an f16 cache where
// every row converted it anew was bound by the conversions, not by memory: Hq 32 over Hk 8, Tq 1,
// D 128, Tk 65536, 2 threads, AMD EPYC (family 25, model 17) Zen 4 VM, 2026-11-29: 23.4 ms
// ([B, T, H, D]) against 9.2 for Hq 8 over the same cache (bench/README.md).
template <class T, class E>
HWY_INLINE void score_dot_rows(const T* const* q, std::int64_t n, const E* HWY_RESTRICT k,
                               std::int64_t dim, T* HWY_RESTRICT s) {
#if HWY_HAVE_SCALABLE
  for (std::int64_t r = 0; r < n; ++r) s[r] = score_dot(q[r], k, dim);
#else
  const hn::ScalableTag<T> d;
  hn::Vec<hn::ScalableTag<T>> lanes[4];
  for (std::int64_t r0 = 0; r0 < n; r0 += 4) {
    const std::int64_t m = std::min<std::int64_t>(4, n - r0);
    score_lanes_upto4(m, q + r0, k, dim, lanes);
    for (std::int64_t r = 0; r < m; ++r) {
      s[r0 + r] = score_tail(q[r0 + r], k, dim, hn::GetLane(hn::SumOfLanes(d, lanes[r])));
    }
  }
#endif
}

// The most keys one score_dots call takes.
inline constexpr std::int64_t kScoreRun = 16;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The sums of the lanes of 16 vectors of 16 f32 lanes, v [16], as one vector (lane c: v[c]'s),
// each pairing its lanes as Highway's SumOfLanes does on AVX-512 (_mm512_reduce_add_ps: lane i
// with i + 8, then i + 4, i + 2 and i + 1), so each lane holds the bits of that vector's
// SumOfLanes. Each level adds two vectors of pairs gathered from two: 15 adds and 30 shuffles for
// the 16 sums, where 16 SumOfLanes take 64 of each. The operands of each add in SumOfLanes' order.
HWY_INLINE hn::Vec512<float> sums_of_16(const hn::Vec512<float>* v) {
  const hn::Full512<float> d;
  const hn::Full512<std::int32_t> di;
  // Lanes [0, 16) from a, [16, 32) from b.
  const auto pick = [](hn::Vec512<float> a, hn::Vec512<std::int32_t> idx, hn::Vec512<float> b) {
    return hn::Vec512<float>{_mm512_permutex2var_ps(a.raw, idx.raw, b.raw)};
  };
  // Level 1: r[j] = the pairs (i, i + 8) of v[2j] in lanes [0, 8), of v[2j + 1] in [8, 16).
  hn::Vec512<float> r[8];
  for (int j = 0; j < 8; ++j) {
    r[j] = hn::Add(hn::ConcatUpperUpper(d, v[2 * j + 1], v[2 * j]),
                   hn::ConcatLowerLower(d, v[2 * j + 1], v[2 * j]));
  }
  // Level 2: t[m] = the pairs (i, i + 4) of each 8-lane half of r[2m] and r[2m + 1]: vectors
  // 4m .. 4m + 3 in 4 lanes each.
  alignas(64) static constexpr std::int32_t kHalvesLow[16] = {0,  1,  2,  3,  8,  9,  10, 11,
                                                              16, 17, 18, 19, 24, 25, 26, 27};
  alignas(64) static constexpr std::int32_t kHalvesHigh[16] = {4,  5,  6,  7,  12, 13, 14, 15,
                                                               20, 21, 22, 23, 28, 29, 30, 31};
  const auto halves_low = hn::Load(di, kHalvesLow), halves_high = hn::Load(di, kHalvesHigh);
  hn::Vec512<float> t[4];
  for (int m = 0; m < 4; ++m) {
    t[m] = hn::Add(pick(r[2 * m], halves_high, r[2 * m + 1]),
                   pick(r[2 * m], halves_low, r[2 * m + 1]));
  }
  // Level 3: u[n] = the pairs (i, i + 2) of each 4-lane quarter: vectors 8n .. 8n + 7 in 2 lanes.
  alignas(64) static constexpr std::int32_t kQuartersLow[16] = {0,  1,  4,  5,  8,  9,  12, 13,
                                                                16, 17, 20, 21, 24, 25, 28, 29};
  alignas(64) static constexpr std::int32_t kQuartersHigh[16] = {2,  3,  6,  7,  10, 11, 14, 15,
                                                                 18, 19, 22, 23, 26, 27, 30, 31};
  const auto quarters_low = hn::Load(di, kQuartersLow), quarters_high = hn::Load(di, kQuartersHigh);
  hn::Vec512<float> u[2];
  for (int n = 0; n < 2; ++n) {
    u[n] = hn::Add(pick(t[2 * n], quarters_low, t[2 * n + 1]),
                   pick(t[2 * n], quarters_high, t[2 * n + 1]));
  }
  // Level 4: the pairs (i, i + 1): vector c's sum in lane c.
  return hn::Add(hn::ConcatEven(d, u[1], u[0]), hn::ConcatOdd(d, u[1], u[0]));
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// score_lanes (f32, AVX-512) of R query rows whose NV vectors q [R][NV] are held in registers,
// against one key k: each lanes[r] gets the bits of score_lanes(q_r, k, 16 NV), the same
// multiply-adds into the same four accumulators in the same order. The rows are loaded once for a
// whole run of keys instead of once a key.
template <int NV, int R, class E>
HWY_INLINE void held_lanes(const hn::Vec512<float> (&q)[R][NV], const E* HWY_RESTRICT k,
                           hn::Vec512<float>* lanes) {
  static_assert(NV % 4 == 0, "score_lanes' steps of four vectors, with no single ones after");
  const hn::Full512<float> d;
  hn::Vec512<float> acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int u = 0; u < 4; ++u) acc[r][u] = hn::Zero(d);
  }
  for (int x = 0; x < NV; ++x) {
    const auto kx = load_as(d, k + x * 16);
    for (int r = 0; r < R; ++r) acc[r][x % 4] = hn::MulAdd(q[r][x], kx, acc[r][x % 4]);
  }
  for (int r = 0; r < R; ++r) {
    lanes[r] = hn::Add(hn::Add(acc[r][0], acc[r][1]), hn::Add(acc[r][2], acc[r][3]));
  }
}

// lanes[r][c] <- score_lanes(q[r], k + c ldk, 16 NV) for the R rows q [R] and the keys c in
// [0, n), the rows' vectors loaded once (held_lanes).
template <int NV, int R, class E>
HWY_INLINE void held_run(const float* const* q, const E* HWY_RESTRICT k, std::int64_t ldk,
                         std::int64_t n, hn::Vec512<float> (*lanes)[kScoreRun]) {
  const hn::Full512<float> d;
  hn::Vec512<float> held[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int x = 0; x < NV; ++x) held[r][x] = hn::LoadU(d, q[r] + x * 16);
  }
  hn::Vec512<float> key[R];
  for (std::int64_t c = 0; c < n; ++c) {
    held_lanes<NV, R>(held, k + c * ldk, key);
    for (int r = 0; r < R; ++r) lanes[r][c] = key[r];
  }
}
#endif

// Whether this target sums the lanes of a run of scores in one tree (sums_of_16): AVX-512, f32.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
template <class T>
inline constexpr bool kSharedSums = std::is_same_v<T, float>;
#else
template <class T>
inline constexpr bool kSharedSums = false;
#endif

// s [n] <- score_dot(q, k + c ldk, dim) for the keys c in [0, n), n at most kScoreRun, bitwise.
// Where kSharedSums<T>, from 6 keys up, the n lane sums share one tree (sums_of_16) instead of a
// SumOfLanes each. 6: where the tree's ~45 operations undercut 8 a key; the driver of decode_impl's
// `runs` (q [32, 1, 4, 32], one thread, AMD EPYC Zen 5 VM, 2026-11-29, us a call, key by key /
// runs) measured Tk 6 12.5 / 12.4-12.7 and Tk 8 13.6-13.7 / 13.3: level at 6, ahead from 8.
template <class T, class E>
HWY_INLINE void score_dots(const T* HWY_RESTRICT q, const E* HWY_RESTRICT k, std::int64_t ldk,
                           std::int64_t n, std::int64_t dim, T* HWY_RESTRICT s) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kSharedSums<T>) {
    constexpr std::int64_t kMinShared = 6;
    if (n >= kMinShared) {
      const hn::Full512<float> d;
      hn::Vec512<float> lanes[kScoreRun];
      for (std::int64_t c = 0; c < kScoreRun; ++c) {
        lanes[c] = c < n ? score_lanes(q, k + c * ldk, dim) : hn::Zero(d);
      }
      hn::BlendedStore(sums_of_16(lanes), hn::FirstN(d, static_cast<std::size_t>(n)), d, s);
      if (dim % static_cast<std::int64_t>(hn::Lanes(d)) != 0) {
        for (std::int64_t c = 0; c < n; ++c) s[c] = score_tail(q, k + c * ldk, dim, s[c]);
      }
      return;
    }
  }
#endif
  for (std::int64_t c = 0; c < n; ++c) s[c] = score_dot(q, k + c * ldk, dim);
}

// s[r] [n] <- score_dots(q[r], k, ldk, n, dim, s[r]) for the query rows r in [0, rows), rows at
// most kDotRows, bitwise: each key's row loaded and converted once for up to four query rows
// (score_lanes_rows), and each row's n lane sums in one tree where kSharedSums<T>. At D = 128 two
// rows at a time are held in registers for the whole run (held_run) and each key's row is
// converted once per two rows, where loading four rows' q for every key took more loads than
// multiply-adds: a driver alternating both ways call by call (qkv::attention_forward, heads-first
// cache [1, 8, 16384, 128], Tq 1 over Hq 32 or 16, Tq 4 over Hq 8, 2 threads, AMD EPYC (family
// 25, model 17) Zen 4 VM, 2026-11-29, medians of 21 calls, two rounds), held over loaded: f16
// 0.93-0.97, bf16 0.96-0.98, f32 0.92-1.00 (bench/README.md).
template <class T, class E>
HWY_INLINE void score_dots_rows(const T* const* q, std::int64_t rows, const E* HWY_RESTRICT k,
                                std::int64_t ldk, std::int64_t n, std::int64_t dim, T* const* s) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kSharedSums<T>) {
    constexpr std::int64_t kMinShared = 6;  // as score_dots
    if (n >= kMinShared) {
      const hn::Full512<float> d;
      hn::Vec512<float> lanes[kDotRows][kScoreRun];
      if (dim == 128) {  // two rows' 16 vectors held, with their 8 accumulators
        std::int64_t r0 = 0;
        for (; r0 + 2 <= rows; r0 += 2) held_run<8, 2>(q + r0, k, ldk, n, lanes + r0);
        if (r0 < rows) held_run<8, 1>(q + r0, k, ldk, n, lanes + r0);
      } else {
        for (std::int64_t r0 = 0; r0 < rows; r0 += 4) {
          const std::int64_t m = std::min<std::int64_t>(4, rows - r0);
          hn::Vec512<float> key[4];
          for (std::int64_t c = 0; c < n; ++c) {
            score_lanes_upto4(m, q + r0, k + c * ldk, dim, key);
            for (std::int64_t r = 0; r < m; ++r) lanes[r0 + r][c] = key[r];
          }
        }
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = n; c < kScoreRun; ++c) lanes[r][c] = hn::Zero(d);
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        hn::BlendedStore(sums_of_16(lanes[r]), hn::FirstN(d, static_cast<std::size_t>(n)), d, s[r]);
        if (dim % static_cast<std::int64_t>(hn::Lanes(d)) != 0) {
          for (std::int64_t c = 0; c < n; ++c)
            s[r][c] = score_tail(q[r], k + c * ldk, dim, s[r][c]);
        }
      }
      return;
    }
  }
#endif
  T out[kDotRows];
  for (std::int64_t c = 0; c < n; ++c) {
    score_dot_rows(q, rows, k + c * ldk, dim, out);
    for (std::int64_t r = 0; r < rows; ++r) s[r][c] = out[r];
  }
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELSCPU_SCORE_DOT_INL_H_
