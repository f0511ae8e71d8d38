// Register-tiled matrix products for the fused kernels, compiled once per SIMD target (Highway's
// per-target include guard: this header is re-included by foreach_target.h).
#if defined(QKV_KERNELS_CPU_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_CPU_GEMM_INL_H_
#undef QKV_KERNELS_CPU_GEMM_INL_H_
#else
#define QKV_KERNELS_CPU_GEMM_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// C[R rows, V vectors] (+)= A[R, K] B[K, V vectors]: the accumulators stay in registers for the
// whole K loop; each step loads V vectors of B and broadcasts one element of A per row.
template <std::int64_t R, std::int64_t V, class D, class T>
HWY_INLINE void gemm_tile(D d, std::int64_t K, const T* HWY_RESTRICT A, std::int64_t lda,
                          const T* HWY_RESTRICT B, std::int64_t ldb, T* HWY_RESTRICT C,
                          std::int64_t ldc, bool accumulate) {
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  hn::Vec<D> acc[R][V];
  for (std::int64_t r = 0; r < R; ++r) {
    for (std::int64_t v = 0; v < V; ++v) {
      acc[r][v] = accumulate ? hn::LoadU(d, C + r * ldc + v * L) : hn::Zero(d);
    }
  }
  for (std::int64_t k = 0; k < K; ++k) {
    hn::Vec<D> b[V];
    for (std::int64_t v = 0; v < V; ++v) b[v] = hn::LoadU(d, B + k * ldb + v * L);
    for (std::int64_t r = 0; r < R; ++r) {
      const auto a = hn::Set(d, A[r * lda + k]);
      for (std::int64_t v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(a, b[v], acc[r][v]);
    }
  }
  for (std::int64_t r = 0; r < R; ++r) {
    for (std::int64_t v = 0; v < V; ++v) hn::StoreU(acc[r][v], d, C + r * ldc + v * L);
  }
}

// Columns [n, N) that do not fill a vector, one scalar at a time.
template <class T>
HWY_INLINE void gemm_scalar_columns(std::int64_t M, std::int64_t n, std::int64_t N, std::int64_t K,
                                    const T* HWY_RESTRICT A, std::int64_t lda,
                                    const T* HWY_RESTRICT B, std::int64_t ldb, T* HWY_RESTRICT C,
                                    std::int64_t ldc, bool accumulate) {
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t c = n; c < N; ++c) {
      T sum = accumulate ? C[m * ldc + c] : T(0);
      for (std::int64_t k = 0; k < K; ++k) sum += A[m * lda + k] * B[k * ldb + c];
      C[m * ldc + c] = sum;
    }
  }
}

// C[M, N] = (accumulate ? C : 0) + A[M, K] B[K, N], all row-major with leading dimensions
// lda, ldb, ldc (in elements).
template <class T>
HWY_INLINE void gemm(std::int64_t M, std::int64_t N, std::int64_t K, const T* HWY_RESTRICT A,
                     std::int64_t lda, const T* HWY_RESTRICT B, std::int64_t ldb, T* HWY_RESTRICT C,
                     std::int64_t ldc, bool accumulate) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  // 4 rows x 3 vectors: 12 accumulators + 3 loads + 1 broadcast fill AVX2's 16 registers.
  constexpr std::int64_t kRows = 4;
  constexpr std::int64_t kVecs = 3;
  std::int64_t n = 0;
  for (; n + kVecs * L <= N; n += kVecs * L) {
    std::int64_t m = 0;
    for (; m + kRows <= M; m += kRows) {
      gemm_tile<kRows, kVecs>(d, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, accumulate);
    }
    for (; m < M; ++m) {
      gemm_tile<1, kVecs>(d, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, accumulate);
    }
  }
  for (; n + L <= N; n += L) {
    std::int64_t m = 0;
    for (; m + kRows <= M; m += kRows) {
      gemm_tile<kRows, 1>(d, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, accumulate);
    }
    for (; m < M; ++m) {
      gemm_tile<1, 1>(d, K, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, accumulate);
    }
  }
  if (n < N) gemm_scalar_columns(M, n, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_CPU_GEMM_INL_H_
