// linear (PyTorch's F.linear): y = x W^T + b as one node, the bias written into y before the
// product adds onto it, and the backward's three products read x, W and dy where they lie.
#include <algorithm>
#include <string>
#include <vector>

#include "autograd/kernels.hpp"
#include "autograd/node.hpp"
#include "kernels/cpu/blas.hpp"
#include "qkv/autograd/ops.hpp"
#include "qkv/error.hpp"

namespace qkv::autograd {
namespace {

// W's rows read in place where each lies contiguous (a whole weight, or a slice of rows of a
// packed one): its row stride, or 0 where it must be copied.
std::int64_t row_stride(const Tensor& w) {
  if (w.stride(1) != 1 && w.size(1) > 1) return 0;
  return w.size(0) > 1 ? w.stride(0) : w.size(1);
}

}  // namespace

// x [..., K], weight [N, K], bias [N] (or undefined) -> [..., N]
Var linear(const Var& x, const Var& weight, const Var& bias) {
  kernels::expect_any_floating(x.value(), "x");
  kernels::expect_any_floating(weight.value(), "weight");
  kernels::expect_same_dtype(x.value(), weight.value(), "weight");
  if (weight.dim() != 2) throw Error("weight", "[N, K]", shape_string(weight.shape()));
  const std::int64_t N = weight.size(0), K = weight.size(1);
  if (x.dim() < 1 || x.size(-1) != K) {
    throw Error("x", "[..., " + std::to_string(K) + "] (the columns of weight)",
                shape_string(x.shape()));
  }
  if (bias.defined()) {
    kernels::expect_same_dtype(weight.value(), bias.value(), "bias");
    if (bias.dim() != 1 || bias.size(0) != N) {
      throw Error("bias", "[" + std::to_string(N) + "] (the rows of weight)",
                  shape_string(bias.shape()));
    }
  }
  const DType dtype = x.dtype();
  if ((dtype != DType::f32 && dtype != DType::f64) || autocast_dtype()) {
    // bf16, f16 and autocast as matmul computes them: y = matmul(x, W^T) + b
    const Var y = matmul(x, transpose(weight, 0, 1));
    return bias.defined() ? y + bias : y;
  }
  const Tensor xv = x.value().contiguous();
  const Tensor wv = row_stride(weight.value()) != 0 ? weight.value() : weight.value().contiguous();
  const std::int64_t ldw = row_stride(wv);
  const std::int64_t R = xv.numel() / K;
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor out = Tensor::empty(out_shape, dtype);
  const Tensor bv = bias.defined() ? bias.value().contiguous() : Tensor();
  kernels::dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* y = out.data_as<T>();
    if (bv.defined()) {
      const T* b = bv.data_as<T>();
      for (std::int64_t r = 0; r < R; ++r) std::copy(b, b + N, y + r * N);
    }
    // y = x W^T (+ the bias already there)
    qkv::kernels::cpu::blas_gemm(false, true, R, N, K, xv.data_as<T>(), K, wv.data_as<T>(), ldw,
                                 bv.defined(), y, N);
  });
  std::vector<Var> inputs = {x, weight};
  if (bias.defined()) inputs.push_back(bias);
  const Shape x_shape = x.shape();
  return detail::record(std::move(out), inputs, [=](const Tensor& dy) {
    const Tensor g = dy.contiguous();  // [R, N]
    Tensor dx = Tensor::empty(x_shape, dtype), dw = Tensor::empty({N, K}, dtype);
    Tensor db = bv.defined() ? Tensor::empty({N}, dtype) : Tensor();
    kernels::dispatch(dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* gp = g.data_as<T>();
      // y = x W^T + b: dx = dy W, dW = dy^T x, db = the column sums of dy
      qkv::kernels::cpu::blas_gemm(false, false, R, K, N, gp, N, wv.data_as<T>(), ldw, false,
                                   dx.data_as<T>(), K);
      qkv::kernels::cpu::blas_gemm(true, false, N, K, R, gp, N, xv.data_as<T>(), K, false,
                                   dw.data_as<T>(), K);
      if (db.defined()) {
        std::vector<double> sums(static_cast<std::size_t>(N), 0.0);
        for (std::int64_t r = 0; r < R; ++r) {
          for (std::int64_t n = 0; n < N; ++n) sums[n] += static_cast<double>(gp[r * N + n]);
        }
        T* d = db.data_as<T>();
        for (std::int64_t n = 0; n < N; ++n) d[n] = static_cast<T>(sums[n]);
      }
    });
    std::vector<Tensor> grads = {dx, dw};
    if (db.defined()) grads.push_back(db);
    return grads;
  });
}

}  // namespace qkv::autograd
