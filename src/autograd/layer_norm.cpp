// layer_norm over the trailing dimensions, with optional weight and bias.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "autograd/kernels.hpp"
#include "autograd/node.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

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
    const T* in = xv.data_as<T>();
    const T* w = wv.defined() ? wv.data_as<T>() : nullptr;
    const T* b = bv.defined() ? bv.data_as<T>() : nullptr;
    T* o = out.data_as<T>();
    T* h = xhat.data_as<T>();
    double* r = rstd.data_as<double>();
    for (std::int64_t row = 0; row < rows; ++row) {
      const T* xr = in + row * n;
      double mean = 0;
      for (std::int64_t j = 0; j < n; ++j) mean += xr[j];
      mean /= n;
      double var = 0;
      for (std::int64_t j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean);
      var /= n;
      // rstd = 1 / sqrt(var + eps); xhat = (x - mean) * rstd; out = xhat * w + b
      r[row] = 1 / std::sqrt(var + eps);
      for (std::int64_t j = 0; j < n; ++j) {
        const double xh = (xr[j] - mean) * r[row];
        h[row * n + j] = static_cast<T>(xh);
        o[row * n + j] = static_cast<T>(xh * (w ? w[j] : T(1)) + (b ? b[j] : T(0)));
      }
    }
  });
  const bool need_w = weight.defined(), need_b = bias.defined();
  return detail::record(std::move(out), {&x, &weight, &bias}, [=](const Tensor& dout) {
    const Tensor g = dout.contiguous();
    Tensor dx = Tensor::empty(xs, dtype);
    Tensor dw = Tensor::zeros(normalized_shape, dtype);
    Tensor db = Tensor::zeros(normalized_shape, dtype);
    kernels::dispatch(dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* pg = g.data_as<T>();
      const T* h = xhat.data_as<T>();
      const T* w = wv.defined() ? wv.data_as<T>() : nullptr;
      const double* r = rstd.data_as<double>();
      std::vector<double> dw_acc(n, 0.0), db_acc(n, 0.0);
      T* pd = dx.data_as<T>();
      for (std::int64_t row = 0; row < rows; ++row) {
        // out = xhat * w + b: dxhat = g * w, dw += g * xhat, db += g
        double mean_dxhat = 0, mean_dxhat_xhat = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          const double gj = pg[row * n + j];
          const double dxh = gj * (w ? w[j] : T(1));
          mean_dxhat += dxh;
          mean_dxhat_xhat += dxh * h[row * n + j];
          dw_acc[j] += gj * h[row * n + j];
          db_acc[j] += gj;
        }
        mean_dxhat /= n;
        mean_dxhat_xhat /= n;
        // xhat = (x - mean) * rstd: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
        for (std::int64_t j = 0; j < n; ++j) {
          const double dxh = pg[row * n + j] * static_cast<double>(w ? w[j] : T(1));
          pd[row * n + j] =
              static_cast<T>(r[row] * (dxh - mean_dxhat - h[row * n + j] * mean_dxhat_xhat));
        }
      }
      for (std::int64_t j = 0; j < n; ++j) {
        dw.data_as<T>()[j] = static_cast<T>(dw_acc[j]);
        db.data_as<T>()[j] = static_cast<T>(db_acc[j]);
      }
    });
    return std::vector<Tensor>{dx, need_w ? dw : Tensor(), need_b ? db : Tensor()};
  });
}

}  // namespace qkv::autograd
