// sum, mean and max, over one dimension or all of them.
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/kernels.hpp"
#include "autograd/node.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {
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

// x seen as [outer, n, inner] -> [outer, inner], reduced along n.
Var reduce(const Var& x, std::int64_t dim, const Shape& out_shape, Reduce kind) {
  const Shape x_shape = x.shape();
  const kernels::Lanes l = kernels::lanes(x_shape, dim);
  const Tensor xv = x.value().contiguous();
  const DType dtype = x.dtype();
  if (kind == Reduce::max && l.n == 0) {
    throw Error("x", "a non-empty dimension to take the max over", shape_string(x_shape));
  }
  Tensor out = Tensor::empty(out_shape, dtype);
  kernels::dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* in = xv.data_as<T>();
    T* o = out.data_as<T>();
    for (std::int64_t a = 0; a < l.outer; ++a) {
      for (std::int64_t i = 0; i < l.inner; ++i) {
        const T* lane = in + a * l.n * l.inner + i;
        double acc = kind == Reduce::max ? -std::numeric_limits<double>::infinity() : 0.0;
        for (std::int64_t j = 0; j < l.n; ++j) {
          const double v = lane[j * l.inner];
          // out = sum_j x_j (mean: / n), or max_j x_j
          acc = kind == Reduce::max ? std::fmax(acc, v) : acc + v;
        }
        o[a * l.inner + i] = static_cast<T>(kind == Reduce::mean ? acc / l.n : acc);
      }
    }
  });
  const Tensor saved_out = out;
  return detail::record(std::move(out), {&x}, [=](const Tensor& dout) {
    const Tensor g = dout.contiguous();
    Tensor dx = Tensor::empty(x_shape, dtype);
    kernels::dispatch(dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* pg = g.data_as<T>();
      const T* px = xv.data_as<T>();
      const T* pm = saved_out.data_as<T>();
      T* pd = dx.data_as<T>();
      for (std::int64_t a = 0; a < l.outer; ++a) {
        for (std::int64_t i = 0; i < l.inner; ++i) {
          const std::int64_t r = a * l.inner + i;
          const std::int64_t base = a * l.n * l.inner + i;
          if (kind == Reduce::max) {
            // out = max_j x_j: the gradient goes to the maxima, shared equally among ties
            std::int64_t ties = 0;
            for (std::int64_t j = 0; j < l.n; ++j) ties += px[base + j * l.inner] == pm[r];
            for (std::int64_t j = 0; j < l.n; ++j) {
              pd[base + j * l.inner] =
                  px[base + j * l.inner] == pm[r] ? static_cast<T>(pg[r] / ties) : T(0);
            }
          } else {
            // out = sum_j x_j (mean: / n)
            const T d = kind == Reduce::mean ? static_cast<T>(pg[r] / l.n) : pg[r];
            for (std::int64_t j = 0; j < l.n; ++j) pd[base + j * l.inner] = d;
          }
        }
      }
    });
    return std::vector<Tensor>{dx};
  });
}

// Over every element: x flattened to [1, numel, 1], giving [].
Var reduce_all(const Var& x, Reduce kind) {
  kernels::expect_floating(x.value(), "x");
  const Var flat = reshape(x, {x.numel()});
  return reduce(flat, 0, {}, kind);
}

Var reduce_dim(const Var& x, std::int64_t dim, bool keepdim, Reduce kind) {
  kernels::expect_floating(x.value(), "x");
  const std::int64_t d = kernels::wrap_dim(dim, x.dim(), "dim");
  return reduce(x, d, reduced_shape(x.shape(), d, keepdim), kind);
}

}  // namespace

// x [...] -> []
Var sum(const Var& x) { return reduce_all(x, Reduce::sum); }
Var mean(const Var& x) { return reduce_all(x, Reduce::mean); }
Var max(const Var& x) { return reduce_all(x, Reduce::max); }
// x [..., n, ...] -> [..., ...] (or [..., 1, ...] with keepdim)
Var sum(const Var& x, std::int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, keepdim, Reduce::sum);
}
Var mean(const Var& x, std::int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, keepdim, Reduce::mean);
}
Var max(const Var& x, std::int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, keepdim, Reduce::max);
}

}  // namespace qkv::autograd
