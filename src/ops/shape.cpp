// concat: tensors joined along one dimension.
#include <string>

#include "ops/tensor_math.hpp"
#include "qkv/ops.hpp"

namespace qkv::ops {

// xs[i] [..., n_i, ...] -> [..., sum n_i, ...]
Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim) {
  if (xs.empty()) throw Error("xs", "at least one tensor", "none");
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::string name = "xs[" + std::to_string(i) + "]";
    expect_any_floating(xs[i], name.c_str());
    expect_same_dtype(xs[0], xs[i], name.c_str());
  }
  const std::int64_t d = wrap_dim(dim, xs[0].dim(), "dim");
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
  std::int64_t start = 0;
  for (const Tensor& x : xs) {
    out.slice(d, start, start + x.size(d)).copy_from(x);
    start += x.size(d);
  }
  return out;
}

}  // namespace qkv::ops
