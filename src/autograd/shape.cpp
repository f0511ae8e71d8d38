// reshape, permute, split_heads, merge_heads, concat, slice: moves of elements, no arithmetic.
#include <string>
#include <vector>

#include "autograd/kernels.hpp"
#include "autograd/node.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

// x [...] -> [shape]
Var reshape(const Var& x, const Shape& shape) {
  kernels::expect_floating(x.value(), "x");
  const Shape x_shape = x.shape();
  // out = x.reshape(shape)
  Tensor out = x.value().reshape(shape);
  return detail::record(std::move(out), {&x},
                        [=](const Tensor& g) { return std::vector<Tensor>{g.reshape(x_shape)}; });
}

// x [...] -> [x.shape[dims[0]], x.shape[dims[1]], ...]
Var permute(const Var& x, const Shape& dims) {
  kernels::expect_floating(x.value(), "x");
  // out = x.permute(dims)
  Tensor out = x.value().permute(dims);
  Shape inverse(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) inverse[dims[d]] = static_cast<std::int64_t>(d);
  return detail::record(std::move(out), {&x},
                        [=](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
}

// x [...] -> x with dimensions a and b swapped
Var transpose(const Var& x, std::int64_t a, std::int64_t b) {
  kernels::expect_floating(x.value(), "x");
  const std::int64_t da = kernels::wrap_dim(a, x.dim(), "a");
  const std::int64_t db = kernels::wrap_dim(b, x.dim(), "b");
  Shape dims(x.dim());
  for (std::int64_t d = 0; d < x.dim(); ++d) dims[d] = d;
  std::swap(dims[da], dims[db]);
  return permute(x, dims);
}

// x [B, T, H * D] -> [B, T, H, D]
Var split_heads(const Var& x, std::int64_t heads) {
  kernels::expect_floating(x.value(), "x");
  if (x.dim() != 3) throw Error("x", "3 dimensions [B, T, H * D]", x.value().describe());
  if (heads <= 0 || x.size(2) % heads != 0) {
    throw Error("heads", "a positive divisor of " + std::to_string(x.size(2)) + " (x's last size)",
                std::to_string(heads));
  }
  return reshape(x, {x.size(0), x.size(1), heads, x.size(2) / heads});
}

// x [B, T, H, D] -> [B, T, H * D]
Var merge_heads(const Var& x) {
  kernels::expect_floating(x.value(), "x");
  if (x.dim() != 4) throw Error("x", "4 dimensions [B, T, H, D]", x.value().describe());
  return reshape(x, {x.size(0), x.size(1), x.size(2) * x.size(3)});
}

// xs[i] [..., n_i, ...] -> [..., sum n_i, ...]
Var concat(const std::vector<Var>& xs, std::int64_t dim) {
  if (xs.empty()) throw Error("xs", "at least one Var", "none");
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::string name = "xs[" + std::to_string(i) + "]";
    kernels::expect_floating(xs[i].value(), name.c_str());
    kernels::expect_same_dtype(xs[0].value(), xs[i].value(), name.c_str());
  }
  const std::int64_t d = kernels::wrap_dim(dim, xs[0].dim(), "dim");
  Shape shape = xs[0].shape();
  shape[d] = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    Shape expected = xs[0].shape();
    expected[d] = xs[i].size(d);
    if (xs[i].shape() != expected) {
      throw Error(
          "xs[" + std::to_string(i) + "]",
          "shape " + shape_string(expected) + " (as xs[0] but along dim " + std::to_string(d) + ")",
          shape_string(xs[i].shape()));
    }
    shape[d] += xs[i].size(d);
  }
  // out[..., start_i : start_i + n_i, ...] = xs[i]
  Tensor out = Tensor::empty(shape, xs[0].dtype());
  std::vector<std::int64_t> starts;
  std::int64_t start = 0;
  for (const Var& x : xs) {
    starts.push_back(start);
    out.slice(d, start, start + x.size(d)).copy_from(x.value());
    start += x.size(d);
  }
  std::vector<std::int64_t> sizes;
  for (const Var& x : xs) sizes.push_back(x.size(d));
  return detail::record(std::move(out), xs, [=](const Tensor& g) {
    std::vector<Tensor> grads;
    for (std::size_t i = 0; i < starts.size(); ++i) {
      grads.push_back(g.slice(d, starts[i], starts[i] + sizes[i]));
    }
    return grads;
  });
}

// x [..., n, ...] -> [..., m, ...], m = the count of start, start + step, ... below end
Var slice(const Var& x, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step) {
  kernels::expect_floating(x.value(), "x");
  const std::int64_t d = kernels::wrap_dim(dim, x.dim(), "dim");
  if (step <= 0) throw Error("step", "a positive step", std::to_string(step));
  const Shape x_shape = x.shape();
  // out = x[..., start:end:step, ...]
  Tensor out = x.value().slice(d, start, end, step);
  return detail::record(std::move(out), {&x}, [=](const Tensor& g) {
    Tensor dx = Tensor::zeros(x_shape, g.dtype());
    dx.slice(d, start, end, step).copy_from(g);
    return std::vector<Tensor>{dx};
  });
}

}  // namespace qkv::autograd
