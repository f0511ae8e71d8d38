// layer_norm over the trailing dimensions, with optional weight and bias.
#include "ops/layer_norm.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "kernels/cpu/layer_norm.hpp"
#include "ops/parallel.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/ops.hpp"

namespace qkv::ops {

namespace {

// layer_norm_saving, with xhat left undefined unless keep_xhat.
LayerNormSaved layer_norm_of(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                             const Tensor& bias, double eps, bool keep_xhat) {
  expect_floating(x, "x");
  const std::int64_t k = static_cast<std::int64_t>(normalized_shape.size());
  const Shape& xs = x.shape();
  if (k == 0 || k > x.dim() ||
      !std::equal(normalized_shape.begin(), normalized_shape.end(), xs.end() - k)) {
    throw Error("normalized_shape", "the trailing sizes of x " + shape_string(xs),
                shape_string(normalized_shape));
  }
  for (const auto& [param, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!param->defined()) continue;
    expect_floating(*param, name);
    expect_same_dtype(x, *param, name);
    if (param->shape() != normalized_shape) {
      throw Error(name, "shape " + shape_string(normalized_shape), shape_string(param->shape()));
    }
  }
  if (!(eps >= 0)) throw Error("eps", "a non-negative number", std::to_string(eps));
  std::int64_t n = 1;
  for (const std::int64_t s : normalized_shape) n *= s;
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  const DType dtype = x.dtype();
  const Tensor xv = x.contiguous();
  const Tensor wv = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor bv = bias.defined() ? bias.contiguous() : Tensor();
  LayerNormSaved r{Tensor::empty(xs, dtype), keep_xhat ? Tensor::empty(xs, dtype) : Tensor(),
                   Tensor::empty({rows}, DType::f64)};
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    // rstd = 1 / sqrt(var + eps); xhat = (x - mean) * rstd; out = xhat * w + b
    for_range(rows, rows_per_chunk(n), 1, [&](std::int64_t begin, std::int64_t end) {
      kernels::cpu::layer_norm_rows(
          xv.data_as<T>() + begin * n, end - begin, n, wv.defined() ? wv.data_as<T>() : nullptr,
          bv.defined() ? bv.data_as<T>() : nullptr, eps, r.out.data_as<T>() + begin * n,
          keep_xhat ? r.xhat.data_as<T>() + begin * n : nullptr, r.rstd.data_as<double>() + begin);
    });
  });
  return r;
}

}  // namespace

// x [..., *normalized_shape], weight [*normalized_shape], bias [*normalized_shape] -> x's shape
LayerNormSaved layer_norm_saving(const Tensor& x, const Shape& normalized_shape,
                                 const Tensor& weight, const Tensor& bias, double eps) {
  return layer_norm_of(x, normalized_shape, weight, bias, eps, true);
}

// x [..., *normalized_shape] -> x's shape
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  return layer_norm_of(x, normalized_shape, weight, bias, eps, false).out;
}

}  // namespace qkv::ops
