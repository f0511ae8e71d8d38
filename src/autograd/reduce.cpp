// sum, mean and max, over one dimension or all of them.
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {
namespace {

enum class Reduce { sum, mean, max };

// x [..., n, ...] and out = ops::sum / mean / max over dimension dim (computed by the caller) ->
// the Var of out, with the backward.
Var record_reduce(const Var& x, std::int64_t dim, Tensor out, Reduce kind) {
  const Shape x_shape = x.shape();
  const ops::Lanes l = ops::lanes(x_shape, dim);
  const Tensor xv = kind == Reduce::max ? x.value().contiguous() : Tensor();
  const Tensor saved_out = kind == Reduce::max ? out : Tensor();
  const DType dtype = x.dtype();
  return detail::record(std::move(out), {&x}, [=](const Tensor& dout) {
    const Tensor g = dout.contiguous();
    Tensor dx = Tensor::empty(x_shape, dtype);
    ops::dispatch(dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* pg = g.data_as<T>();
      T* pd = dx.data_as<T>();
      ops::for_each_lane(l, [&](std::int64_t base, std::int64_t r) {
        if (kind == Reduce::max) {
          // out = max_j x_j: the gradient goes to the maxima, shared equally among ties
          const T* px = xv.data_as<T>();
          const T* pm = saved_out.data_as<T>();
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
      });
    });
    return std::vector<Tensor>{dx};
  });
}

// Over every element: the reduction of x flattened to [numel], giving [].
Var reduce_all(const Var& x, Tensor out, Reduce kind) {
  return record_reduce(reshape(x, {x.numel()}), 0, std::move(out), kind);
}

Var reduce_dim(const Var& x, std::int64_t dim, Tensor out, Reduce kind) {
  return record_reduce(x, ops::wrap_dim(dim, x.dim(), "dim"), std::move(out), kind);
}

}  // namespace

// x [...] -> []
Var sum(const Var& x) { return reduce_all(x, ops::sum(x.value()), Reduce::sum); }
Var mean(const Var& x) { return reduce_all(x, ops::mean(x.value()), Reduce::mean); }
Var max(const Var& x) { return reduce_all(x, ops::max(x.value()), Reduce::max); }
// x [..., n, ...] -> [..., ...] (or [..., 1, ...] with keepdim)
Var sum(const Var& x, std::int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, ops::sum(x.value(), dim, keepdim), Reduce::sum);
}
Var mean(const Var& x, std::int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, ops::mean(x.value(), dim, keepdim), Reduce::mean);
}
Var max(const Var& x, std::int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, ops::max(x.value(), dim, keepdim), Reduce::max);
}

}  // namespace qkv::autograd
