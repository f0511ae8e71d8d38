// reshape, permute, split_heads, merge_heads, concat, slice, pack_rows, unpack_rows: moves of
// elements, no arithmetic.
#include <string>
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

// x [...] -> [shape]
Var reshape(const Var& x, const Shape& shape) {
  ops::expect_floating(x.value(), "x");
  const Shape x_shape = x.shape();
  // out = x.reshape(shape)
  Tensor out = x.value().reshape(shape);
  return detail::record(std::move(out), {&x},
                        [=](const Tensor& g) { return std::vector<Tensor>{g.reshape(x_shape)}; });
}

// x [...] -> [x.shape[dims[0]], x.shape[dims[1]], ...]
Var permute(const Var& x, const Shape& dims) {
  ops::expect_floating(x.value(), "x");
  // out = x.permute(dims)
  Tensor out = x.value().permute(dims);
  Shape inverse(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) inverse[dims[d]] = static_cast<std::int64_t>(d);
  return detail::record(std::move(out), {&x},
                        [=](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
}

// x [...] -> x with dimensions a and b swapped
Var transpose(const Var& x, std::int64_t a, std::int64_t b) {
  ops::expect_floating(x.value(), "x");
  const std::int64_t da = ops::wrap_dim(a, x.dim(), "a");
  const std::int64_t db = ops::wrap_dim(b, x.dim(), "b");
  Shape dims(x.dim());
  for (std::int64_t d = 0; d < x.dim(); ++d) dims[d] = d;
  std::swap(dims[da], dims[db]);
  return permute(x, dims);
}

// x [B, T, H * D] -> [B, T, H, D]
Var split_heads(const Var& x, std::int64_t heads) {
  ops::expect_floating(x.value(), "x");
  if (x.dim() != 3) throw Error("x", "3 dimensions [B, T, H * D]", x.value().describe());
  if (heads <= 0 || x.size(2) % heads != 0) {
    throw Error("heads", "a positive divisor of " + std::to_string(x.size(2)) + " (x's last size)",
                std::to_string(heads));
  }
  return reshape(x, {x.size(0), x.size(1), heads, x.size(2) / heads});
}

// x [B, T, H, D] -> [B, T, H * D]
Var merge_heads(const Var& x) {
  ops::expect_floating(x.value(), "x");
  if (x.dim() != 4) throw Error("x", "4 dimensions [B, T, H, D]", x.value().describe());
  return reshape(x, {x.size(0), x.size(1), x.size(2) * x.size(3)});
}

// xs[i] [..., n_i, ...] -> [..., sum n_i, ...]
Var concat(const std::vector<Var>& xs, std::int64_t dim) {
  if (xs.empty()) throw Error("xs", "at least one Var", "none");
  std::vector<Tensor> values;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    ops::expect_floating(xs[i].value(), ("xs[" + std::to_string(i) + "]").c_str());
    values.push_back(xs[i].value());
  }
  // out[..., start_i : start_i + n_i, ...] = xs[i]
  Tensor out = ops::concat(values, dim);
  const std::int64_t d = ops::wrap_dim(dim, xs[0].dim(), "dim");
  std::vector<std::int64_t> starts;
  std::int64_t start = 0;
  for (const Var& x : xs) {
    starts.push_back(start);
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
  ops::expect_floating(x.value(), "x");
  const std::int64_t d = ops::wrap_dim(dim, x.dim(), "dim");
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

// x [B, T, ...] -> [n, ...]
Var pack_rows(const Var& x, const std::vector<std::int64_t>& lengths) {
  const std::int64_t T = x.dim() >= 2 ? x.size(1) : 0;
  // out = x's rows (b, t < lengths[b]), in order
  return detail::record(ops::pack_rows(x.value(), lengths), {&x}, [=](const Tensor& g) {
    return std::vector<Tensor>{ops::unpack_rows(g, lengths, T)};
  });
}

// x [n, ...] -> [B, T, ...]
Var unpack_rows(const Var& x, const std::vector<std::int64_t>& lengths, std::int64_t T) {
  // out[b, t] = x's row sum(lengths[:b]) + t for t < lengths[b], else 0
  return detail::record(ops::unpack_rows(x.value(), lengths, T), {&x}, [=](const Tensor& g) {
    return std::vector<Tensor>{ops::pack_rows(g, lengths)};
  });
}

}  // namespace qkv::autograd
