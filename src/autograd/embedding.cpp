// embedding: rows of a table picked by integer indices.
#include <algorithm>
#include <string>
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

// weight [V, E], indices of shape [...] -> [..., E]
Var embedding(const Var& weight, const std::vector<std::int64_t>& indices, const Shape& shape) {
  ops::expect_floating(weight.value(), "weight");
  if (weight.dim() != 2) throw Error("weight", "2 dimensions [V, E]", weight.value().describe());
  std::int64_t count = 1;
  for (const std::int64_t s : shape) {
    if (s < 0) throw Error("shape", "non-negative sizes", shape_string(shape));
    count *= s;
  }
  if (count != static_cast<std::int64_t>(indices.size())) {
    throw Error("indices", std::to_string(count) + " indices (shape " + shape_string(shape) + ")",
                std::to_string(indices.size()));
  }
  const std::int64_t V = weight.size(0), E = weight.size(1);
  for (std::size_t n = 0; n < indices.size(); ++n) {
    if (indices[n] < 0 || indices[n] >= V) {
      throw Error("indices[" + std::to_string(n) + "]",
                  "an index in [0, " + std::to_string(V) + ")", std::to_string(indices[n]));
    }
  }
  Shape out_shape = shape;
  out_shape.push_back(E);
  const Tensor wv = weight.value().contiguous();
  Tensor out = Tensor::empty(out_shape, weight.dtype());
  ops::dispatch(weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* w = wv.data_as<T>();
    T* o = out.data_as<T>();
    // out[n, :] = weight[indices[n], :]
    for (std::size_t n = 0; n < indices.size(); ++n) {
      std::copy(w + indices[n] * E, w + (indices[n] + 1) * E, o + n * E);
    }
  });
  const Shape w_shape = weight.shape();
  return detail::record(std::move(out), {&weight}, [=](const Tensor& dout) {
    const Tensor g = dout.contiguous();
    Tensor dw = Tensor::zeros(w_shape, g.dtype());
    ops::dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* pg = g.data_as<T>();
      T* pd = dw.data_as<T>();
      // out[n, :] = weight[indices[n], :]: dweight[indices[n], :] += dout[n, :]
      for (std::size_t n = 0; n < indices.size(); ++n) {
        for (std::int64_t e = 0; e < E; ++e) pd[indices[n] * E + e] += pg[n * E + e];
      }
    });
    return std::vector<Tensor>{dw};
  });
}

}  // namespace qkv::autograd
