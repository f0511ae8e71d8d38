// matmul (batched, broadcast) and linear, through the BLAS.
#include "ops/matmul.hpp"

#include <algorithm>
#include <string>

#include "kernels/cpu/blas.hpp"
#include "qkv/ops.hpp"

namespace qkv::ops {
namespace {

std::int64_t numel_of(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t s : shape) n *= s;
  return n;
}

}  // namespace

// a [..., M, K], b [..., K, N]
MatmulPlan plan_matmul(const Tensor& a, const Tensor& b) {
  expect_any_floating(a, "a");
  expect_any_floating(b, "b");
  expect_same_dtype(a, b, "b");
  if (a.dim() < 2) throw Error("a", "at least 2 dimensions [..., M, K]", a.describe());
  if (b.dim() < 2) throw Error("b", "at least 2 dimensions [..., K, N]", b.describe());
  MatmulPlan p;
  p.M = a.size(-2);
  p.K = a.size(-1);
  p.N = b.size(-1);
  if (b.size(-2) != p.K) {
    throw Error("b",
                std::to_string(p.K) + " rows (the columns of a " + shape_string(a.shape()) + ")",
                shape_string(b.shape()));
  }
  const Shape a_batch(a.shape().begin(), a.shape().end() - 2);
  const Shape b_batch(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(a_batch, b_batch, "b");
  p.P = numel_of(batch);
  p.out_shape = batch;
  p.out_shape.insert(p.out_shape.end(), {p.M, p.N});
  p.a_full = batch;
  p.a_full.insert(p.a_full.end(), {p.M, p.K});
  p.b_full = batch;
  p.b_full.insert(p.b_full.end(), {p.K, p.N});
  p.shared_b = numel_of(b_batch) == 1 && a_batch == batch;
  p.b_transposed =
      p.shared_b && b.dim() == 2 && !b.is_contiguous() && b.transpose(0, 1).is_contiguous();
  p.dtype = a.dtype();
  p.compute = is_half(p.dtype) ? DType::f32 : p.dtype;
  return p;
}

std::pair<Tensor, Tensor> matmul_operands(const MatmulPlan& p, const Tensor& a, const Tensor& b) {
  return {broadcast_to(a.to(p.compute), p.a_full),
          p.b_transposed ? b.transpose(0, 1).to(p.compute)  // [N, K]
          : p.shared_b   ? b.reshape({p.K, p.N}).to(p.compute).contiguous()
                         : broadcast_to(b.to(p.compute), p.b_full)};
}

Tensor matmul_planned(const MatmulPlan& p, const Tensor& av, const Tensor& bv) {
  Tensor out = Tensor::empty(p.out_shape, p.compute);
  dispatch(p.compute, [&](auto zero) {
    using T = decltype(zero);
    // out[p] = a[p] @ b[p]
    if (p.b_transposed) {
      gemm(false, true, p.P * p.M, p.N, p.K, av.data_as<T>(), p.K, bv.data_as<T>(), p.K,
           out.data_as<T>(), p.N);
    } else if (p.shared_b) {
      gemm(false, false, p.P * p.M, p.N, p.K, av.data_as<T>(), p.K, bv.data_as<T>(), p.N,
           out.data_as<T>(), p.N);
    } else {
      batched_gemm<T>(false, false, p.P, p.M, p.N, p.K, av.data_as<T>(), bv.data_as<T>(),
                      out.data_as<T>());
    }
  });
  return out;
}

// a [..., M, K], b [..., K, N] -> [..., M, N]
Tensor matmul(const Tensor& a, const Tensor& b) {
  const MatmulPlan plan = plan_matmul(a, b);
  const std::pair<Tensor, Tensor> operands = matmul_operands(plan, a, b);
  return matmul_planned(plan, operands.first, operands.second).to(plan.dtype);
}

void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  expect_any_floating(x, "x");
  expect_any_floating(weight, "weight");
  expect_same_dtype(x, weight, "weight");
  if (weight.dim() != 2) throw Error("weight", "[N, K]", shape_string(weight.shape()));
  const std::int64_t N = weight.size(0), K = weight.size(1);
  if (x.dim() < 1 || x.size(-1) != K) {
    throw Error("x", "[..., " + std::to_string(K) + "] (the columns of weight)",
                shape_string(x.shape()));
  }
  if (bias.defined()) {
    expect_same_dtype(weight, bias, "bias");
    if (bias.dim() != 1 || bias.size(0) != N) {
      throw Error("bias", "[" + std::to_string(N) + "] (the rows of weight)",
                  shape_string(bias.shape()));
    }
  }
}

LinearOperands linear_operands(const Tensor& x, const Tensor& weight) {
  // W's row stride where each row lies contiguous, else 0
  const auto row_stride = [](const Tensor& w) -> std::int64_t {
    if (w.stride(1) != 1 && w.size(1) > 1) return 0;
    return w.size(0) > 1 ? w.stride(0) : w.size(1);
  };
  LinearOperands o;
  o.N = weight.size(0);
  o.K = weight.size(1);
  o.x = x.contiguous();
  o.w = row_stride(weight) != 0 ? weight : weight.contiguous();
  o.ldw = row_stride(o.w);
  o.R = 1;
  for (std::int64_t d = 0; d + 1 < x.dim(); ++d) o.R *= x.size(d);
  return o;
}

Tensor linear_planned(const LinearOperands& o, const Tensor& bias, const Shape& out_shape) {
  const std::int64_t R = o.R, N = o.N;
  Tensor out = Tensor::empty(out_shape, o.x.dtype());
  const Tensor bv = bias.defined() ? bias.contiguous() : Tensor();
  dispatch(o.x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    // y = b + x W^T
    kernels::cpu::blas_linear(R, N, o.K, o.x.data_as<T>(), o.K, o.w.data_as<T>(), o.ldw,
                              bv.defined() ? bv.data_as<T>() : nullptr, out.data_as<T>(), N);
  });
  return out;
}

// x [..., K], weight [N, K], bias [N] (or undefined) -> [..., N]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear(x, weight, bias);
  if (is_half(x.dtype())) {
    // y = matmul(x, W^T) + b, each rounded once
    const Tensor y = matmul(x, weight.transpose(0, 1));
    return bias.defined() ? add(y, bias) : y;
  }
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  return linear_planned(linear_operands(x, weight), bias, out_shape);
}

}  // namespace qkv::ops
