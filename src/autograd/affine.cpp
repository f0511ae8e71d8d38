// linear (PyTorch's F.linear): y = x W^T + b as one node, the bias written into y before the
// product adds onto it, and the backward's three products read x, W and dy where they lie.
#include <algorithm>
#include <string>
#include <vector>

#include "autograd/node.hpp"
#include "kernels/cpu/blas.hpp"
#include "ops/matmul.hpp"
#include "ops/parallel.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"
#include "qkv/error.hpp"

namespace qkv::autograd {

// x [..., K], weight [N, K], bias [N] (or undefined) -> [..., N]
Var linear(const Var& x, const Var& weight, const Var& bias) {
  ops::check_linear(x.value(), weight.value(), bias.defined() ? bias.value() : Tensor());
  const DType dtype = x.dtype();
  if ((dtype != DType::f32 && dtype != DType::f64) || autocast_dtype()) {
    // bf16, f16 and autocast as matmul computes them: y = matmul(x, W^T) + b
    const Var y = matmul(x, transpose(weight, 0, 1));
    return bias.defined() ? y + bias : y;
  }
  const ops::LinearOperands o = ops::linear_operands(x.value(), weight.value());
  const std::int64_t N = o.N, K = o.K, R = o.R, ldw = o.ldw;
  const Tensor xv = o.x, wv = o.w;
  const bool has_bias = bias.defined();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  // y = x W^T + b
  Tensor out = ops::linear_planned(o, has_bias ? bias.value() : Tensor(), out_shape);
  std::vector<Var> inputs = {x, weight};
  if (bias.defined()) inputs.push_back(bias);
  const Shape x_shape = x.shape();
  return detail::record(std::move(out), inputs, [=](const Tensor& dy) {
    const Tensor g = dy.contiguous();  // [R, N]
    Tensor dx = Tensor::empty(x_shape, dtype), dw = Tensor::empty({N, K}, dtype);
    Tensor db = has_bias ? Tensor::empty({N}, dtype) : Tensor();
    ops::dispatch(dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* gp = g.data_as<T>();
      // y = x W^T + b: dx = dy W, dW = dy^T x, db = the column sums of dy
      qkv::kernels::cpu::blas_gemm(false, false, R, K, N, gp, N, wv.data_as<T>(), ldw, false,
                                   dx.data_as<T>(), K);
      qkv::kernels::cpu::blas_gemm(true, false, N, K, R, gp, N, xv.data_as<T>(), K, false,
                                   dw.data_as<T>(), K);
      if (db.defined()) {
        // Columns split over the threads, each summed over every row in row order.
        std::vector<double> sums(static_cast<std::size_t>(N), 0.0);
        double* s = sums.data();
        T* d = db.data_as<T>();
        ops::for_range(N, std::max<std::int64_t>(16, ops::rows_per_chunk(R)), 16,
                       [&](std::int64_t begin, std::int64_t end) {
                         for (std::int64_t r = 0; r < R; ++r) {
                           const T* row = gp + r * N;
                           for (std::int64_t n = begin; n < end; ++n) s[n] += row[n];
                         }
                         for (std::int64_t n = begin; n < end; ++n) d[n] = static_cast<T>(s[n]);
                       });
      }
    });
    std::vector<Tensor> grads = {dx, dw};
    if (db.defined()) grads.push_back(db);
    return grads;
  });
}

}  // namespace qkv::autograd
