// matmul and batched matmul, through the BLAS.
#include "ops/matmul.hpp"

#include <optional>
#include <utility>
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {
namespace {

// a [..., M, K], b [..., K, N] (f32, f64, or both bf16 or both f16: checked) -> [..., M, N]. Half
// a and b are widened to f32 for the BLAS (exactly) and the result rounded once; the backward
// keeps the half values, widens them again, and rounds da and db once.
Var matmul_blas(const Var& a, const Var& b) {
  const ops::MatmulPlan plan = ops::plan_matmul(a.value(), b.value());
  const bool half = ops::is_half(plan.dtype);
  // Named Tensors, not a structured binding: the lambdas below capture them (clang 14 cannot
  // capture a binding).
  const std::pair<Tensor, Tensor> forward_operands =
      ops::matmul_operands(plan, a.value(), b.value());
  // out[p] = a[p] @ b[p]
  Tensor out = ops::matmul_planned(plan, forward_operands.first, forward_operands.second);
  const Shape a_shape = a.shape(), b_shape = b.shape();
  // The backward keeps the half values (half the memory of their f32 widening), or the f32 and
  // f64 operands as the gemm read them.
  const Tensor saved_a = half ? a.value() : forward_operands.first;
  const Tensor saved_b = half ? b.value() : forward_operands.second;
  return detail::record(
      half ? out.to(plan.dtype) : std::move(out), {&a, &b}, [=](const Tensor& dout) {
        const std::pair<Tensor, Tensor> backward_operands =
            half ? ops::matmul_operands(plan, saved_a, saved_b) : std::pair{saved_a, saved_b};
        const Tensor& av = backward_operands.first;
        const Tensor& bv = backward_operands.second;
        const std::int64_t P = plan.P, M = plan.M, N = plan.N, K = plan.K;
        const Tensor g = dout.to(plan.compute).contiguous();
        Tensor da = Tensor::empty(plan.a_full, plan.compute);
        Tensor db = Tensor::empty(plan.shared_b ? Shape{K, N} : plan.b_full, plan.compute);
        ops::dispatch(plan.compute, [&](auto zero) {
          using T = decltype(zero);
          if (plan.shared_b) {
            // out = a @ b with a as [P * M, K]: da = dout @ b^T, db = a^T @ dout
            if (plan.b_transposed) {  // bv is b^T [N, K] already
              ops::gemm(false, false, P * M, K, N, g.data_as<T>(), N, bv.data_as<T>(), K,
                        da.data_as<T>(), K);
            } else {
              ops::gemm(false, true, P * M, K, N, g.data_as<T>(), N, bv.data_as<T>(), N,
                        da.data_as<T>(), K);
            }
            ops::gemm(true, false, K, N, P * M, av.data_as<T>(), K, g.data_as<T>(), N,
                      db.data_as<T>(), N);
          } else {
            // out[p] = a[p] @ b[p]: da[p] = dout[p] @ b[p]^T, db[p] = a[p]^T @ dout[p]
            ops::batched_gemm<T>(false, true, P, M, K, N, g.data_as<T>(), bv.data_as<T>(),
                                 da.data_as<T>());
            ops::batched_gemm<T>(true, false, P, K, N, M, av.data_as<T>(), g.data_as<T>(),
                                 db.data_as<T>());
          }
        });
        // Summed over the broadcast dimensions in the compute dtype, then rounded once.
        return std::vector<Tensor>{
            ops::sum_to(da, a_shape).to(plan.dtype),
            ops::sum_to(db.reshape(plan.shared_b ? b_shape : plan.b_full), b_shape).to(plan.dtype)};
      });
}

}  // namespace

// a [..., M, K], b [..., K, N] -> [..., M, N]
Var matmul(const Var& a, const Var& b) {
  ops::expect_any_floating(a.value(), "a");
  ops::expect_any_floating(b.value(), "b");
  ops::expect_same_dtype(a.value(), b.value(), "b");
  const std::optional<DType> autocast = autocast_dtype();
  if (autocast && a.dtype() == DType::f32) {
    // y = matmul(a, b) in the autocast dtype: inputs and result rounded to it, y in f32
    return cast(matmul(cast(a, *autocast), cast(b, *autocast)), DType::f32);
  }
  return matmul_blas(a, b);
}

}  // namespace qkv::autograd
