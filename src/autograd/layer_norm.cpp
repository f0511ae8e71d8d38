// layer_norm over the trailing dimensions, with optional weight and bias.
#include "kernels/cpu/layer_norm.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "autograd/node.hpp"
#include "ops/layer_norm.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

namespace cpu_kernels = qkv::kernels::cpu;

// x [..., *normalized_shape], weight [*normalized_shape], bias [*normalized_shape] -> x's shape
Var layer_norm(const Var& x, const Shape& normalized_shape, const Var& weight, const Var& bias,
               double eps) {
  // rstd = 1 / sqrt(var + eps); xhat = (x - mean) * rstd; out = xhat * w + b
  ops::LayerNormSaved saved = ops::layer_norm_saving(x.value(), normalized_shape,
                                                     weight.defined() ? weight.value() : Tensor(),
                                                     bias.defined() ? bias.value() : Tensor(), eps);
  const Shape xs = x.shape();
  const DType dtype = x.dtype();
  std::int64_t n = 1;
  for (const std::int64_t s : normalized_shape) n *= s;
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  const Tensor xhat = saved.xhat, rstd = saved.rstd;
  const Tensor wv = weight.defined() ? weight.value().contiguous() : Tensor();
  const bool need_w = weight.defined(), need_b = bias.defined();
  return detail::record(std::move(saved.out), {&x, &weight, &bias}, [=](const Tensor& dout) {
    const Tensor g = dout.contiguous();
    Tensor dx = Tensor::empty(xs, dtype);
    Tensor dw = Tensor::empty(normalized_shape, dtype);
    Tensor db = Tensor::empty(normalized_shape, dtype);
    ops::dispatch(dtype, [&](auto zero) {
      using T = decltype(zero);
      std::vector<double> dw_sum(static_cast<std::size_t>(n), 0.0), db_sum(dw_sum);
      // out = xhat * w + b: dxhat = g * w, dw = sum g * xhat, db = sum g;
      // xhat = (x - mean) * rstd: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
      cpu_kernels::layer_norm_backward_rows(
          g.data_as<T>(), xhat.data_as<T>(), wv.defined() ? wv.data_as<T>() : nullptr,
          rstd.data_as<double>(), rows, n, dx.data_as<T>(), dw_sum.data(), db_sum.data());
      for (std::int64_t j = 0; j < n; ++j) {
        dw.data_as<T>()[j] = static_cast<T>(dw_sum[static_cast<std::size_t>(j)]);
        db.data_as<T>()[j] = static_cast<T>(db_sum[static_cast<std::size_t>(j)]);
      }
    });
    return std::vector<Tensor>{dx, need_w ? dw : Tensor(), need_b ? db : Tensor()};
  });
}

}  // namespace qkv::autograd
