#pragma once

// Matrix products of the autodiff engine and the linear layers at the sizes they run (tens to a
// few thousand rows, K up to a few thousand): register tiles over strips of B, with no packing of
// A, compiled for every SIMD target and chosen at run time.

#include <cstdint>

namespace qkv::kernels::cpu {

// Row-major C [M, N] = op(A) op(B), plus C when accumulate; op(A) [M, K], op(B) [K, N] (each
// transposed when asked), lda, ldb, ldc the row strides as stored; on `threads` threads (1: the
// calling thread alone). Each element of C is one chain of multiply-adds over k = 0 .. K - 1 in
// order, from 0 or from C, whichever tile, block or thread computes it: the bits do not depend on
// the thread count or on how C is cut. With bias [N] (and accumulate false), each row of C starts
// from it instead of 0: C = bias + op(A) op(B), the bits of copying bias into C's rows and
// accumulating.
void tiled_gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
                const float* A, std::int64_t lda, const float* B, std::int64_t ldb, bool accumulate,
                float* C, std::int64_t ldc, int threads, const float* bias = nullptr);
void tiled_gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
                const double* A, std::int64_t lda, const double* B, std::int64_t ldb,
                bool accumulate, double* C, std::int64_t ldc, int threads,
                const double* bias = nullptr);

// The arguments of one tiled_gemm call, as its per-target code receives them.
template <class T>
struct TiledProduct {
  bool ta, tb;
  std::int64_t M, N, K;
  const T* A;
  std::int64_t lda;
  const T* B;
  std::int64_t ldb;
  bool accumulate;
  T* C;
  std::int64_t ldc;
  const T* bias;      // [N] or null: every row of C starts from it
  const T* row_bias;  // [M] or null: row m of C starts from its element m (the transposed product)
};

}  // namespace qkv::kernels::cpu
