// Laying K and V out in tiles for the fused kernels' products. Per-target include guard (the
// transpose is SIMD).
#if defined(QKV_KERNELS_CPU_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_CPU_PACK_INL_H_
#undef QKV_KERNELS_CPU_PACK_INL_H_
#else
#define QKV_KERNELS_CPU_PACK_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/cpu/load_as-inl.h"
#include "kernels/cpu/tile_traits.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// dst [4, ld_dst] <- the transpose of src [4 rows, 4] (row stride ld_src), f32, in 128-bit
// vectors: two rounds of interleaves, of 32-bit then of 64-bit lanes.
HWY_INLINE void transpose_4x4(const float* src, std::int64_t ld_src, float* dst,
                              std::int64_t ld_dst) {
  const hn::FixedTag<float, 4> d;
  const hn::Repartition<double, decltype(d)> d2;
  const auto r0 = hn::LoadU(d, src), r1 = hn::LoadU(d, src + ld_src);
  const auto r2 = hn::LoadU(d, src + 2 * ld_src), r3 = hn::LoadU(d, src + 3 * ld_src);
  const auto a = hn::BitCast(d2, hn::InterleaveLower(d, r0, r1));  // r0[0] r1[0] r0[1] r1[1]
  const auto b = hn::BitCast(d2, hn::InterleaveUpper(d, r0, r1));  // r0[2] r1[2] r0[3] r1[3]
  const auto c = hn::BitCast(d2, hn::InterleaveLower(d, r2, r3));
  const auto e = hn::BitCast(d2, hn::InterleaveUpper(d, r2, r3));
  hn::StoreU(hn::BitCast(d, hn::InterleaveLower(d2, a, c)), d, dst);
  hn::StoreU(hn::BitCast(d, hn::InterleaveUpper(d2, a, c)), d, dst + ld_dst);
  hn::StoreU(hn::BitCast(d, hn::InterleaveLower(d2, b, e)), d, dst + 2 * ld_dst);
  hn::StoreU(hn::BitCast(d, hn::InterleaveUpper(d2, b, e)), d, dst + 3 * ld_dst);
}

#if HWY_TARGET <= HWY_AVX2
// dst [8, ld_dst] <- the transpose of src [8 rows, 8] (row stride ld_src), f32, in 256-bit
// vectors: interleaves of 32-bit then 64-bit lanes within each 128-bit half, then the halves
// exchanged. 24 shuffles, 8 loads and 8 stores where four 4 x 4 blocks take 32, 16 and 16.
HWY_INLINE void transpose_8x8(const float* src, std::int64_t ld_src, float* dst,
                              std::int64_t ld_dst) {
  const hn::FixedTag<float, 8> d;
  const hn::Repartition<double, decltype(d)> d2;
  decltype(hn::Zero(d2)) u[8];
  for (int half = 0; half < 2; ++half) {
    const float* rows = src + 4 * half * ld_src;
    const auto r0 = hn::LoadU(d, rows), r1 = hn::LoadU(d, rows + ld_src);
    const auto r2 = hn::LoadU(d, rows + 2 * ld_src), r3 = hn::LoadU(d, rows + 3 * ld_src);
    const auto t0 = hn::BitCast(d2, hn::InterleaveLower(d, r0, r1));  // columns 0 1 | 4 5
    const auto t1 = hn::BitCast(d2, hn::InterleaveUpper(d, r0, r1));  // columns 2 3 | 6 7
    const auto t2 = hn::BitCast(d2, hn::InterleaveLower(d, r2, r3));
    const auto t3 = hn::BitCast(d2, hn::InterleaveUpper(d, r2, r3));
    u[4 * half + 0] = hn::InterleaveLower(d2, t0, t2);  // column 0 | column 4, these 4 rows
    u[4 * half + 1] = hn::InterleaveUpper(d2, t0, t2);  // column 1 | column 5
    u[4 * half + 2] = hn::InterleaveLower(d2, t1, t3);  // column 2 | column 6
    u[4 * half + 3] = hn::InterleaveUpper(d2, t1, t3);  // column 3 | column 7
  }
  for (int c = 0; c < 4; ++c) {
    const auto top = hn::BitCast(d, u[c]), bottom = hn::BitCast(d, u[4 + c]);
    hn::StoreU(hn::ConcatLowerLower(d, bottom, top), d, dst + c * ld_dst);
    hn::StoreU(hn::ConcatUpperUpper(d, bottom, top), d, dst + (c + 4) * ld_dst);
  }
}
#endif

// The same for f64, 2 x 2.
HWY_INLINE void transpose_2x2(const double* src, std::int64_t ld_src, double* dst,
                              std::int64_t ld_dst) {
  const hn::FixedTag<double, 2> d;
  const auto r0 = hn::LoadU(d, src), r1 = hn::LoadU(d, src + ld_src);
  hn::StoreU(hn::InterleaveLower(d, r0, r1), d, dst);
  hn::StoreU(hn::InterleaveUpper(d, r0, r1), d, dst + ld_dst);
}
#endif

// src rows [n, cols] with row stride ld -> the first n elements of dst's rows [cols, ld_dst] (the
// transpose); the rest of each row of dst is left as it is. In square blocks of one 128-bit vector
// per row, which every SIMD target has: a tile of K [T, 8, 64] f32 read from memory, 8 heads of T
// = 8192 one tile after another on one thread of the AMD EPYC Zen 3 VM, took 15 ms element by
// element and 6-7 ms so (where reading K from memory is ~4 ms).
template <class T>
void transpose_rows(const T* src, std::int64_t ld, std::int64_t n, std::int64_t cols, T* dst,
                    std::int64_t ld_dst) {
  std::int64_t j = 0;
#if HWY_TARGET <= HWY_AVX2
  // Whole 8 x 8 blocks first where the vectors are 256 bits or wider: a sliding window's forward
  // (T = 8192, H = 8, [B, T, H, D], 2 threads of an Intel Xeon VM, 2026-11-27, time over full x
  // kept tiles, builds alternated twice) 1.43, 1.43 -> 1.36, 1.37; heads-first 1.31 -> 1.27.
  if constexpr (std::is_same_v<T, float>) {
    if (cols % 8 == 0) {
      for (; j + 8 <= n; j += 8) {
        for (std::int64_t c = 0; c < cols; c += 8) {
          transpose_8x8(src + j * ld + c, ld, dst + c * ld_dst + j, ld_dst);
        }
      }
    }
  }
#endif
#if HWY_TARGET != HWY_SCALAR
  constexpr std::int64_t kSide = 16 / sizeof(T);
  for (; j + kSide <= n; j += kSide) {
    std::int64_t c = 0;
    for (; c + kSide <= cols; c += kSide) {
      if constexpr (kSide == 4) {
        transpose_4x4(src + j * ld + c, ld, dst + c * ld_dst + j, ld_dst);
      } else {
        transpose_2x2(src + j * ld + c, ld, dst + c * ld_dst + j, ld_dst);
      }
    }
    for (; c < cols; ++c) {
      for (std::int64_t x = j; x < j + kSide; ++x) dst[c * ld_dst + x] = src[x * ld + c];
    }
  }
#endif
  for (; j < n; ++j) {
    for (std::int64_t c = 0; c < cols; ++c) dst[c * ld_dst + j] = src[j * ld + c];
  }
}

// src rows [n, cols] with row stride ld -> dst [cols, n_pad] (the transpose), columns n..n_zero
// zero (n_zero <= n_pad; by default all of them, and the rest left as they are where a product
// reads only the first n_zero). Lays a tile of K (or V) out as [D, kBk] so that a score tile is
// a row-major product.
template <class T>
void pack_transposed(const T* src, std::int64_t ld, std::int64_t n, std::int64_t cols,
                     std::int64_t n_pad, T* dst, std::int64_t n_zero = -1) {
  if (n_zero < 0) n_zero = n_pad;
  transpose_rows(src, ld, n, cols, dst, n_pad);
  for (std::int64_t c = 0; c < cols; ++c)
    std::fill(dst + c * n_pad + n, dst + c * n_pad + n_zero, T(0));
}

// src rows [n, cols] stored as E (load_as-inl.h: bf16 or f16 bits, or T) with row stride ld ->
// dst [n, cols] in T, row stride ld_dst: each value converted exactly.
template <class T, class E>
void convert_rows(const E* src, std::int64_t ld, std::int64_t n, std::int64_t cols, T* dst,
                  std::int64_t ld_dst) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  for (std::int64_t j = 0; j < n; ++j) {
    const E* row = src + j * ld;
    T* out = dst + j * ld_dst;
    std::int64_t c = 0;
    for (; c + L <= cols; c += L) hn::StoreU(load_as(d, row + c), d, out + c);
    for (; c < cols; ++c) out[c] = value_as<T>(row[c]);
  }
}

// src rows [n, cols] (stored as E: T, or bf16 / f16 converted) with row stride ld -> dst [n_pad,
// cols], rows n..n_pad zero (a V or K tile stored contiguously, so that a product walking it never
// strides across pages or cache sets).
template <class T, class E>
void pack_rows(const E* src, std::int64_t ld, std::int64_t n, std::int64_t cols, std::int64_t n_pad,
               T* dst) {
  convert_rows(src, ld, n, cols, dst, cols);
  std::fill(dst + n * cols, dst + n_pad * cols, T(0));
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_CPU_PACK_INL_H_
