#pragma once

// The pieces of qkv::ops::matmul and qkv::ops::linear that autograd's backward reuses: the shape
// plan, the gemm operands, the batched gemm, the argument checks.
#include <cstdint>
#include <utility>

#include "ops/tensor_math.hpp"
#include "qkv/tensor.hpp"

namespace qkv::ops {

// a [..., M, K] @ b [..., K, N] laid out for the BLAS.
struct MatmulPlan {
  std::int64_t P = 1, M = 0, N = 0, K = 0;  // P: the broadcast batch's element count
  Shape out_shape;                          // [*batch, M, N]
  Shape a_full, b_full;                     // [*batch, M, K], [*batch, K, N]
  // A b [K, N] shared by the whole batch (a linear layer): a multiplies as one [P * M, K].
  bool shared_b = false;
  // A shared b that is the transpose of a contiguous [N, K] matrix (a Linear layer's W^T), read
  // in place with the gemm transposing it: copying W made up 40% of a decoder step at one token
  // (perf of qkv translate, 2026-11-23).
  bool b_transposed = false;
  DType dtype = DType::f32;    // of a and b
  DType compute = DType::f32;  // f32 for bf16 and f16, else dtype
};

// Checks a and b (any floating dtype, one dtype, at least 2-D, K matching, batches broadcast).
MatmulPlan plan_matmul(const Tensor& a, const Tensor& b);

// The gemm operands from a's and b's values: contiguous, broadcast, in the compute dtype (b as
// b^T [N, K] when b_transposed); a and b themselves where nothing needs changing.
std::pair<Tensor, Tensor> matmul_operands(const MatmulPlan& plan, const Tensor& a, const Tensor& b);

// av, bv from matmul_operands -> out [*batch, M, N] in the compute dtype.
Tensor matmul_planned(const MatmulPlan& plan, const Tensor& av, const Tensor& bv);

// a [P, M, K] (or its transpose per flag), b likewise, both contiguous -> c [P, M, N]: one gemm
// per batch entry.
template <class T>
void batched_gemm(bool ta, bool tb, std::int64_t P, std::int64_t M, std::int64_t N, std::int64_t K,
                  const T* a, const T* b, T* c) {
  const std::int64_t lda = ta ? M : K;
  const std::int64_t ldb = tb ? K : N;
  for (std::int64_t p = 0; p < P; ++p) {
    gemm(ta, tb, M, N, K, a + p * M * K, lda, b + p * K * N, ldb, c + p * M * N, N);
  }
}

// Checks x [..., K], weight [N, K] and bias [N] (or undefined) for linear: one floating dtype.
void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// x [..., K] and weight [N, K] (checked) laid out for the BLAS: x contiguous as [R, K]; W read
// in place where its rows lie contiguous (a whole weight, or a slice of rows of a packed one),
// with row stride ldw, else copied.
struct LinearOperands {
  Tensor x, w;
  std::int64_t R = 0, N = 0, K = 0, ldw = 0;
};
LinearOperands linear_operands(const Tensor& x, const Tensor& weight);

// f32 or f64 operands, bias [N] or undefined -> x W^T + b [R, N] in out_shape.
Tensor linear_planned(const LinearOperands& o, const Tensor& bias, const Shape& out_shape);

}  // namespace qkv::ops
