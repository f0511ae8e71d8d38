// tiled_gemm.hpp per SIMD target. C is cut into strips of two vectors' width and blocks of rows;
// each (row block, strip) pair is one work item. Within an item, register tiles of kTileRows rows
// by the strip's two vectors keep their accumulators for a whole block of K, loading two vectors
// of B and broadcasting one element of A per row at each k. A is read where it lies, row-major or
// transposed; B is read in place where its strip is whole and untransposed, else packed into the
// strip's [K, width] layout first (zeros past N).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/tiled_gemm.cpp"
#include "kernels/cpu/tiled_gemm.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/large_buffer.hpp"
#include "kernels/cpu/pack-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

template <class T>
using Product = TiledProduct<T>;

// Rows of a register tile: 14 rows x 2 vectors are 28 accumulators, with 2 vectors of B and a
// broadcast, in AVX-512's 32 registers; 6 x 2 in the 16 of AVX2 and narrower targets. Measured
// against 6 and 12 rows on an Intel Xeon (AVX-512, AMX; 2026-11-28, one thread, GFLOP/s of
// [420, 128] x [128, N] products, B in place): N = 384 142 / 171 / 177 (BLIS's Skylake-X kernels
// 178), N = 128 147 / 178 / 183 (158), K = 512 N = 128 177 / 185 / 186 (154); with A transposed,
// [336, 448] x [448, 128] 127 / 165 / 176 (157). The AVX2 target's 6 x 2 on the same core (one
// thread, GFLOP/s, against BLIS's Haswell kernels): [448, 128] x [128, 384] with B transposed 120
// (86), [448, 512] x [512, 128] 114 (118), [384, 448] x [448, 128] with A transposed 82 (102),
// [64, 128] x [128, 384] with B transposed 108 (89).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr std::int64_t kTileRows = 14;
#else
constexpr std::int64_t kTileRows = 6;
#endif
constexpr std::int64_t kStripVectors = 2;
// Rows and depth of a work item's block: A's block (128 x 512 f32, 256 KiB) stays in L2 while the
// item's tiles sweep it, B's strip block (512 x 32 f32, 64 KiB) in L1 and L2. A block of rows
// is also the unit the threads share: [448, 128] x [128, 384] is 4 x 12 items.
constexpr std::int64_t kBlockRows = 128;
constexpr std::int64_t kBlockDepth = 512;

// Element (m, k) of A, stored [M, K] row-major or, when kATransposed, as its transpose [K, M].
template <bool kATransposed, class T>
HWY_INLINE T a_at(const T* HWY_RESTRICT A, std::int64_t lda, std::int64_t m, std::int64_t k) {
  return kATransposed ? A[k * lda + m] : A[m * lda + k];
}

// Where a tile's accumulators start: from C (from_c), else from bias [2 vectors] in every row, else
// from row_bias [R] (its element r in every lane of row r), else from 0.
template <class T>
struct Start {
  bool from_c = false;
  const T* bias = nullptr;
  const T* row_bias = nullptr;
};

// C [R, 2 vectors] = start + A [R, K] B [K, 2 vectors], B rows ldb apart.
template <std::int64_t R, bool kATransposed, class D, class T>
HWY_INLINE void tile(D d, std::int64_t K, const T* HWY_RESTRICT A, std::int64_t lda,
                     const T* HWY_RESTRICT B, std::int64_t ldb, const Start<T>& start,
                     T* HWY_RESTRICT C, std::int64_t ldc) {
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  hn::Vec<D> acc[R][kStripVectors];
  for (std::int64_t r = 0; r < R; ++r) {
    for (std::int64_t v = 0; v < kStripVectors; ++v) {
      acc[r][v] = start.from_c     ? hn::LoadU(d, C + r * ldc + v * L)
                  : start.bias     ? hn::LoadU(d, start.bias + v * L)
                  : start.row_bias ? hn::Set(d, start.row_bias[r])
                                   : hn::Zero(d);
    }
  }
  for (std::int64_t k = 0; k < K; ++k) {
    hn::Vec<D> b[kStripVectors];
    for (std::int64_t v = 0; v < kStripVectors; ++v) b[v] = hn::LoadU(d, B + k * ldb + v * L);
    for (std::int64_t r = 0; r < R; ++r) {
      const auto a = hn::Set(d, a_at<kATransposed>(A, lda, r, k));
      for (std::int64_t v = 0; v < kStripVectors; ++v) acc[r][v] = hn::MulAdd(a, b[v], acc[r][v]);
    }
  }
  for (std::int64_t r = 0; r < R; ++r) {
    for (std::int64_t v = 0; v < kStripVectors; ++v) hn::StoreU(acc[r][v], d, C + r * ldc + v * L);
  }
}

// Rows [0, M) of one strip: tiles of kTileRows, then 8, 4, 2 and 1 rows for the tail.
template <bool kATransposed, class D, class T>
void strip_rows(D d, std::int64_t M, std::int64_t K, const T* A, std::int64_t lda, const T* B,
                std::int64_t ldb, const Start<T>& start, T* C, std::int64_t ldc) {
  const auto rows_at = [&](std::int64_t m) { return kATransposed ? A + m : A + m * lda; };
  // The start of the tile at row m.
  const auto at = [&](std::int64_t m) {
    return Start<T>{start.from_c, start.bias, start.row_bias ? start.row_bias + m : nullptr};
  };
  std::int64_t m = 0;
  for (; m + kTileRows <= M; m += kTileRows) {
    tile<kTileRows, kATransposed>(d, K, rows_at(m), lda, B, ldb, at(m), C + m * ldc, ldc);
  }
  if constexpr (kTileRows > 8) {
    if (m + 8 <= M) {
      tile<8, kATransposed>(d, K, rows_at(m), lda, B, ldb, at(m), C + m * ldc, ldc);
      m += 8;
    }
  }
  if (m + 4 <= M) {
    tile<4, kATransposed>(d, K, rows_at(m), lda, B, ldb, at(m), C + m * ldc, ldc);
    m += 4;
  }
  if (m + 2 <= M) {
    tile<2, kATransposed>(d, K, rows_at(m), lda, B, ldb, at(m), C + m * ldc, ldc);
    m += 2;
  }
  if (m < M) tile<1, kATransposed>(d, K, rows_at(m), lda, B, ldb, at(m), C + m * ldc, ldc);
}

// Strip [n0, n0 + cols) of op(B) (cols <= width) packed as [K, width], zeros past cols. From a
// transposed B (stored [N, K]) the strip's rows are transposed in 8 x 8 blocks (pack-inl.h). One
// element at a time, a strip of [384, 128] took ~1.5 us of ~4 us per item (perf, one core of the
// Xeon above). Gathered a vector at a time (GatherIndex), this packing and the transposed
// product's gather of C were 14% of a decoding step of qkv demo's translator, as blocked
// transposes 6% (perf samples, AMD EPYC Zen 5 VM, 2026-11-28): decoding 40.1-41.0k -> 44.1-44.6k
// tokens/s and a training step 16.9-18.1 -> 16.2-16.8 ms (`qkv bench --training`, 2 threads,
// builds alternated three times).
template <class D, class T>
void pack_strip(D d, const Product<T>& p, std::int64_t n0, std::int64_t cols, T* out) {
  const std::int64_t width = kStripVectors * static_cast<std::int64_t>(hn::Lanes(d));
  if (p.tb) return pack_transposed(p.B + n0 * p.ldb, p.ldb, cols, p.K, width, out);
  for (std::int64_t k = 0; k < p.K; ++k) {
    T* row = out + k * width;
    std::copy_n(p.B + k * p.ldb + n0, cols, row);
    std::fill(row + cols, row + width, T(0));
  }
}

// One work item: rows [m0, m0 + rows) of strip [n0, n0 + cols) (cols <= width), every block of
// K in order, its B at b (rows ldb apart). A strip short of the width computes into c_tile
// [kBlockRows, width] (this thread's), whose columns past cols stay 0.
template <bool kATransposed, class D, class T>
void item(D d, const Product<T>& p, std::int64_t m0, std::int64_t rows, std::int64_t n0,
          std::int64_t cols, const T* b, std::int64_t ldb, T* c_tile) {
  const std::int64_t width = kStripVectors * static_cast<std::int64_t>(hn::Lanes(d));
  const bool whole = cols == width;
  T* c = whole ? p.C + m0 * p.ldc + n0 : c_tile;
  const std::int64_t ldc = whole ? p.ldc : width;
  if (!whole) {
    for (std::int64_t r = 0; r < rows; ++r) {
      T* row = c_tile + r * width;
      std::fill(row, row + width, T(0));
      if (p.accumulate) {
        std::copy_n(p.C + (m0 + r) * p.ldc + n0, cols, row);
      } else if (p.bias != nullptr) {
        std::copy_n(p.bias + n0, cols, row);
      } else if (p.row_bias != nullptr) {
        std::fill(row, row + cols, p.row_bias[m0 + r]);
      }
    }
  }
  for (std::int64_t k0 = 0; k0 < p.K; k0 += kBlockDepth) {
    const T* a = kATransposed ? p.A + k0 * p.lda + m0 : p.A + m0 * p.lda + k0;
    const Start<T> start{k0 > 0 || p.accumulate || !whole,
                         p.bias == nullptr ? nullptr : p.bias + n0,
                         p.row_bias == nullptr ? nullptr : p.row_bias + m0};
    strip_rows<kATransposed>(d, rows, std::min(kBlockDepth, p.K - k0), a, p.lda, b + k0 * ldb, ldb,
                             start, c, ldc);
  }
  if (!whole) {
    for (std::int64_t r = 0; r < rows; ++r) {
      std::copy_n(c_tile + r * width, cols, p.C + (m0 + r) * p.ldc + n0);
    }
  }
}

// This thread's buffer `which` (0: a packed strip, 1: c_tile) of at least n elements, kept for
// the thread's next calls (OpenMP's threads live on), so that a small product allocates nothing.
template <class T>
T* thread_buffer(int which, std::size_t n) {
  thread_local hwy::AlignedFreeUniquePtr<T[]> buffers[2];
  thread_local std::size_t sizes[2] = {0, 0};
  if (sizes[which] < n) {
    buffers[which] = hwy::AllocateAligned<T>(n);
    sizes[which] = n;
  }
  return buffers[which].get();
}

// The items in strip-major order, dealt to the threads in contiguous runs (a static schedule), so
// that a thread computes every block of rows of its strips in turn and packs each strip it needs
// once, into its own buffer, right before its tiles read it from L1 and L2. Measured against one
// shared packing pass before items dealt dynamically (2 threads of the Xeon above, [64, 128] x
// [128, 384] and [448, 128] x [128, 384] with B transposed): 42 and 181 us against 25 and 132 for
// this order, where half the strips had come from the other core's cache.
template <bool kATransposed, class T>
void run(const Product<T>& p, int threads) {
  const hn::ScalableTag<T> d;
  const std::int64_t width = kStripVectors * static_cast<std::int64_t>(hn::Lanes(d));
  const std::int64_t strips = (p.N + width - 1) / width;
  const std::int64_t blocks = (p.M + kBlockRows - 1) / kBlockRows;
  const std::int64_t items = strips * blocks;
  const std::int64_t in_place = p.tb ? 0 : p.N / width;  // strips read where B lies
#pragma omp parallel num_threads(threads) if (threads > 1 && items > 1)
  {
    T* strip =
        in_place < strips ? thread_buffer<T>(0, static_cast<std::size_t>(p.K * width)) : nullptr;
    T* c_tile = thread_buffer<T>(1, static_cast<std::size_t>(kBlockRows * width));
    std::int64_t packed = -1;  // the strip in `strip`
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < items; ++i) {
      const std::int64_t s = i / blocks, m0 = i % blocks * kBlockRows;
      const std::int64_t n0 = s * width, cols = std::min(width, p.N - n0);
      if (s >= in_place && s != packed) {
        pack_strip(d, p, n0, cols, strip);
        packed = s;
      }
      item<kATransposed>(d, p, m0, std::min(kBlockRows, p.M - m0), n0, cols,
                         s < in_place ? p.B + n0 : strip, s < in_place ? p.ldb : width, c_tile);
    }
  }
}

// A product with B transposed (a linear layer's x W^T) whose C is one strip tall runs as its
// transpose on one thread: C^T = op(B)^T op(A)^T, the weights the broadcast operand read where they
// lie, so that only A's few rows are packed instead of every strip of W, and C^T is transposed
// into C at the end. Each element is the same chain of fused multiply-adds (a b + c is b a + c),
// so the bits are those of the direct product. One thread of the Xeon above, 2026-11-28, us,
// transposed against direct: [32, 128] x [384, 128]^T 21-23 against 27-29, [32, 512] x
// [128, 512]^T 28-29 against 38-41; but [48, 128] x [384, 128]^T 44 against 36 (C^T's second strip
// half empty), and on 2 threads [32, 128] x [384, 128]^T 18 against 15 (C^T's items too few).
// A decoding step of qkv demo's translator (its 64 rows in 2 groups of 32): 602-607 us against
// 647-677.
template <class T>
void TiledGemm(const Product<T>& p, int threads) {
  const std::int64_t width =
      kStripVectors * static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<T>()));
  if (threads == 1 && p.tb && !p.accumulate && !p.ta && p.row_bias == nullptr && p.M <= width &&
      2 * p.M <= p.N) {
    const auto ct = allocate_large<T>(static_cast<std::size_t>(p.N * p.M));  // C^T [N, M]
    // C^T [N, M] = W [N, K] (A', row-major) times A^T (B' = A, stored [M, K]: transposed).
    const Product<T> t{false, true,  p.N,   p.M,      p.K, p.B,     p.ldb,
                       p.A,   p.lda, false, ct.get(), p.M, nullptr, p.bias};
    run<false>(t, threads);
    transpose_rows(ct.get(), p.M, p.N, p.M, p.C, p.ldc);  // C [M, N] <- (C^T)^T
    return;
  }
  if (p.ta) {
    run<true>(p, threads);
  } else {
    run<false>(p, threads);
  }
}

void TiledGemmF32(const Product<float>& p, int threads) { TiledGemm(p, threads); }
void TiledGemmF64(const Product<double>& p, int threads) { TiledGemm(p, threads); }

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

namespace {

// K = 0: C = 0 (or the bias in every row), or C as it is.
template <class T>
bool empty_depth(std::int64_t M, std::int64_t N, std::int64_t K, bool accumulate, const T* bias,
                 T* C, std::int64_t ldc) {
  if (K != 0) return false;
  if (!accumulate) {
    for (std::int64_t m = 0; m < M; ++m) {
      if (bias != nullptr) {
        std::copy_n(bias, N, C + m * ldc);
      } else {
        std::fill_n(C + m * ldc, N, T(0));
      }
    }
  }
  return true;
}

}  // namespace

HWY_EXPORT(TiledGemmF32);
HWY_EXPORT(TiledGemmF64);

namespace {

// tiled_gemm for T = float or double.
template <class T>
void tiled_of(const TiledProduct<T>& p, int threads) {
  if (p.M == 0 || p.N == 0 || empty_depth(p.M, p.N, p.K, p.accumulate, p.bias, p.C, p.ldc)) return;
  if constexpr (std::is_same_v<T, float>) {
    HWY_DYNAMIC_DISPATCH(TiledGemmF32)(p, threads);
  } else {
    HWY_DYNAMIC_DISPATCH(TiledGemmF64)(p, threads);
  }
}

}  // namespace

void tiled_gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
                const float* A, std::int64_t lda, const float* B, std::int64_t ldb, bool accumulate,
                float* C, std::int64_t ldc, int threads, const float* bias) {
  tiled_of<float>({transpose_a, transpose_b, M, N, K, A, lda, B, ldb, accumulate, C, ldc,
                   accumulate ? nullptr : bias, nullptr},
                  threads);
}

void tiled_gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
                const double* A, std::int64_t lda, const double* B, std::int64_t ldb,
                bool accumulate, double* C, std::int64_t ldc, int threads, const double* bias) {
  tiled_of<double>({transpose_a, transpose_b, M, N, K, A, lda, B, ldb, accumulate, C, ldc,
                    accumulate ? nullptr : bias, nullptr},
                   threads);
}

}  // namespace qkv::kernels::cpu
#endif
