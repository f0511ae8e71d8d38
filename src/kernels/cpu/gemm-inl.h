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

// a * b + c as the vector lanes compute it (one fused multiply-add where the target has one), for
// the scalar tails (score_dot's, axpy's, gemm's last columns): written as a * b + c, the compiler
// contracted it in one instantiation of score_dot and not in another (f32 against bf16 keys,
// AVX2), and the bits differed; and gemm's unfused columns gave dq other bits than the axpy that
// replaces gemm for a tile with a non-finite key (D = 8 on AVX-512's 16 lanes: the poison past a
// key length changed dq by an ulp).
template <class T>
T mul_add(T a, T b, T c) {
  const hn::CappedTag<T, 1> d1;
  return hn::GetLane(hn::MulAdd(hn::Set(d1, a), hn::Set(d1, b), hn::Set(d1, c)));
}

// Element (m, k) of A, stored row-major [M, K] with leading dimension lda, or, when
// kATransposed, stored as its transpose [K, M] (so a product with P^T or dS^T reads P or dS where
// they are, with no transposed copy).
template <bool kATransposed, class T>
HWY_INLINE const T& a_at(const T* HWY_RESTRICT A, std::int64_t lda, std::int64_t m,
                         std::int64_t k) {
  return kATransposed ? A[k * lda + m] : A[m * lda + k];
}

// C[R rows, V vectors] (+)= A[R, K] B[K, V vectors]: the accumulators stay in registers for the
// whole K loop; each step loads V vectors of B and broadcasts one element of A per row.
template <std::int64_t R, std::int64_t V, bool kATransposed, class D, class T>
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
      const auto a = hn::Set(d, a_at<kATransposed>(A, lda, r, k));
      for (std::int64_t v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(a, b[v], acc[r][v]);
    }
  }
  for (std::int64_t r = 0; r < R; ++r) {
    for (std::int64_t v = 0; v < V; ++v) hn::StoreU(acc[r][v], d, C + r * ldc + v * L);
  }
}

// Columns [n, N) that do not fill a vector, one scalar at a time.
template <bool kATransposed, class T>
HWY_INLINE void gemm_scalar_columns(std::int64_t M, std::int64_t n, std::int64_t N, std::int64_t K,
                                    const T* HWY_RESTRICT A, std::int64_t lda,
                                    const T* HWY_RESTRICT B, std::int64_t ldb, T* HWY_RESTRICT C,
                                    std::int64_t ldc, bool accumulate) {
  for (std::int64_t c = n; c < N; ++c) {
    T* c_row = C;
    for (std::int64_t m = 0; m < M; ++m, c_row += ldc) {
      T sum = accumulate ? c_row[c] : T(0);
      const T* b = B + c;
      for (std::int64_t k = 0; k < K; ++k, b += ldb)
        sum = mul_add(a_at<kATransposed>(A, lda, m, k), *b, sum);
      c_row[c] = sum;
    }
  }
}

// Rows [0, M) of one column strip of V vectors: tiles of 6 rows, then 4, 2 and 1 for the
// tail, so that short tails still keep several accumulator chains in flight.
template <std::int64_t V, bool kATransposed, class D, class T>
HWY_INLINE void gemm_strip(D d, std::int64_t M, std::int64_t K, const T* HWY_RESTRICT A,
                           std::int64_t lda, const T* HWY_RESTRICT B, std::int64_t ldb,
                           T* HWY_RESTRICT C, std::int64_t ldc, bool accumulate) {
  const auto rows_at = [&](std::int64_t m) { return kATransposed ? A + m : A + m * lda; };
  std::int64_t m = 0;
  for (; m + 6 <= M; m += 6) {
    gemm_tile<6, V, kATransposed>(d, K, rows_at(m), lda, B, ldb, C + m * ldc, ldc, accumulate);
  }
  if (m + 4 <= M) {
    gemm_tile<4, V, kATransposed>(d, K, rows_at(m), lda, B, ldb, C + m * ldc, ldc, accumulate);
    m += 4;
  }
  if (m + 2 <= M) {
    gemm_tile<2, V, kATransposed>(d, K, rows_at(m), lda, B, ldb, C + m * ldc, ldc, accumulate);
    m += 2;
  }
  if (m < M) {
    gemm_tile<1, V, kATransposed>(d, K, rows_at(m), lda, B, ldb, C + m * ldc, ldc, accumulate);
  }
}

// C[M, N] = (accumulate ? C : 0) + A[M, K] B[K, N], all row-major with leading dimensions
// lda, ldb, ldc (in elements), A stored as [K, M] instead when kATransposed (see a_at).
// kWholeVectors promises N is a multiple of the vector length (score tiles are kBlockK wide), so
// no scalar tail is compiled.
template <bool kWholeVectors = false, bool kATransposed = false, class T>
HWY_INLINE void gemm(std::int64_t M, std::int64_t N, std::int64_t K, const T* HWY_RESTRICT A,
                     std::int64_t lda, const T* HWY_RESTRICT B, std::int64_t ldb, T* HWY_RESTRICT C,
                     std::int64_t ldc, bool accumulate) {
  const hn::ScalableTag<T> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  // 6 rows x 2 vectors: 12 accumulators + 2 loads of B + 1 broadcast of A fill 15 of AVX2's 16
  // registers, and 12 independent FMA chains cover the FMA latency of both pipes.
  std::int64_t n = 0;
  for (; n + 2 * L <= N; n += 2 * L) {
    gemm_strip<2, kATransposed>(d, M, K, A, lda, B + n, ldb, C + n, ldc, accumulate);
  }
  for (; n + L <= N; n += L) {
    gemm_strip<1, kATransposed>(d, M, K, A, lda, B + n, ldb, C + n, ldc, accumulate);
  }
  if constexpr (!kWholeVectors) {
    // Columns short of a vector in vectors of 8 and 4 lanes (where the full one is wider), then
    // scalars: a head dim of 8 on AVX-512's 16 f32 lanes was all scalar, 9 GFLOP/s against 190 at
    // 16 (T 1024, forward, 2 threads of the Zen 5 VM, 2026-11-25). Each element is still one FMA
    // per k in the same order, so the bits are those of the scalar columns.
    const hn::CappedTag<T, 8> d8;
    const auto L8 = static_cast<std::int64_t>(hn::Lanes(d8));
    for (; L8 < L && n + L8 <= N; n += L8) {
      gemm_strip<1, kATransposed>(d8, M, K, A, lda, B + n, ldb, C + n, ldc, accumulate);
    }
    const hn::CappedTag<T, 4> d4;
    const auto L4 = static_cast<std::int64_t>(hn::Lanes(d4));
    for (; L4 < L && n + L4 <= N; n += L4) {
      gemm_strip<1, kATransposed>(d4, M, K, A, lda, B + n, ldb, C + n, ldc, accumulate);
    }
    if (n < N) gemm_scalar_columns<kATransposed>(M, n, N, K, A, lda, B, ldb, C, ldc, accumulate);
  }
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_CPU_GEMM_INL_H_
