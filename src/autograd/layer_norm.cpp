// layer_norm over the trailing dimensions, with optional weight and bias.
#include "kernels/cpu/layer_norm.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "autograd/kernels.hpp"
#include "autograd/node.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

namespace cpu_kernels = qkv::kernels::cpu;

// x [..., *normalized_shape], weight [*normalized_shape], bias [*normalized_shape] -> x's shape
Var layer_norm(const Var& x, const Shape& normalized_shape, const Var& weight, const Var& bias,
               double eps) {
  kernels::expect_floating(x.value(), "x");
  const std::int64_t k = static_cast<std::int64_t>(normalized_shape.size());
  const Shape& xs = x.shape();
  if (k == 0 || k > x.dim() ||
      !std::equal(normalized_shape.begin(), normalized_shape.end(), xs.end() - k)) {
    throw Error("normalized_shape", "the trailing sizes of x " + shape_string(xs),
                shape_string(normalized_shape));
  }
  for (const auto& [param, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!param->defined()) continue;
    kernels::expect_floating(param->value(), name);
    kernels::expect_same_dtype(x.value(), param->value(), name);
    if (param->shape() != normalized_shape) {
      throw Error(name, "shape " + shape_string(normalized_shape), shape_string(param->shape()));
    }
  }
  if (!(eps >= 0)) throw Error("eps", "a non-negative number", std::to_string(eps));
  std::int64_t n = 1;
  for (const std::int64_t s : normalized_shape) n *= s;
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  const DType dtype = x.dtype();
  const Tensor xv = x.value().contiguous();
  const Tensor wv = weight.defined() ? weight.value().contiguous() : Tensor();
  const Tensor bv = bias.defined() ? bias.value().contiguous() : Tensor();
  Tensor out = Tensor::empty(xs, dtype);
  Tensor xhat = Tensor::empty(xs, dtype);  // saved for the backward
  Tensor rstd = Tensor::empty({rows}, DType::f64);
  kernels::dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    // rstd = 1 / sqrt(var + eps); xhat = (x - mean) * rstd; out = xhat * w + b
    cpu_kernels::layer_norm_rows(xv.data_as<T>(), rows, n, wv.defined() ? wv.data_as<T>() : nullptr,
                                 bv.defined() ? bv.data_as<T>() : nullptr, eps, out.data_as<T>(),
                                 xhat.data_as<T>(), rstd.data_as<double>());
  });
  const bool need_w = weight.defined(), need_b = bias.defined();
  return detail::record(std::move(out), {&x, &weight, &bias}, [=](const Tensor& dout) {
    const Tensor g = dout.contiguous();
    Tensor dx = Tensor::empty(xs, dtype);
    Tensor dw = Tensor::empty(normalized_shape, dtype);
    Tensor db = Tensor::empty(normalized_shape, dtype);
    kernels::dispatch(dtype, [&](auto zero) {
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
