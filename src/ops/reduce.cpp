// sum, mean and max, over one dimension or all of them.
#include <cmath>
#include <limits>

#include "ops/tensor_math.hpp"
#include "qkv/ops.hpp"

namespace qkv::ops {
namespace {

enum class Reduce { sum, mean, max };

// x's shape without dimension dim, or with it as 1 when keepdim.
Shape reduced_shape(const Shape& shape, std::int64_t dim, bool keepdim) {
  Shape out = shape;
  if (keepdim) {
    out[dim] = 1;
  } else {
    out.erase(out.begin() + dim);
  }
  return out;
}

// x seen as [outer, n, inner] -> [outer, inner] in out_shape, reduced along n.
Tensor reduce(const Tensor& x, std::int64_t dim, const Shape& out_shape, Reduce kind) {
  const Lanes l = lanes(x.shape(), dim);
  if (kind == Reduce::max && l.n == 0) {
    throw Error("x", "a non-empty dimension to take the max over", shape_string(x.shape()));
  }
  const Tensor xv = x.contiguous();
  Tensor out = Tensor::empty(out_shape, x.dtype());
  dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* in = xv.data_as<T>();
    T* o = out.data_as<T>();
    for_each_lane(l, [&](std::int64_t first, std::int64_t r) {
      double acc = kind == Reduce::max ? -std::numeric_limits<double>::infinity() : 0.0;
      for (std::int64_t j = 0; j < l.n; ++j) {
        const double v = in[first + j * l.inner];
        // out = sum_j x_j (mean: / n), or max_j x_j
        acc = kind == Reduce::max ? std::fmax(acc, v) : acc + v;
      }
      o[r] = static_cast<T>(kind == Reduce::mean ? acc / l.n : acc);
    });
  });
  return out;
}

// Over every element: x flattened to [numel], giving [].
Tensor reduce_all(const Tensor& x, Reduce kind) {
  expect_floating(x, "x");
  return reduce(x.reshape({x.numel()}), 0, {}, kind);
}

Tensor reduce_dim(const Tensor& x, std::int64_t dim, bool keepdim, Reduce kind) {
  expect_floating(x, "x");
  const std::int64_t d = wrap_dim(dim, x.dim(), "dim");
  return reduce(x, d, reduced_shape(x.shape(), d, keepdim), kind);
}

}  // namespace

// x [...] -> []
Tensor sum(const Tensor& x) { return reduce_all(x, Reduce::sum); }
Tensor mean(const Tensor& x) { return reduce_all(x, Reduce::mean); }
Tensor max(const Tensor& x) { return reduce_all(x, Reduce::max); }
// x [..., n, ...] -> [..., ...] (or [..., 1, ...] with keepdim)
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, keepdim, Reduce::sum);
}
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, keepdim, Reduce::mean);
}
Tensor max(const Tensor& x, std::int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, keepdim, Reduce::max);
}

}  // namespace qkv::ops
