// masked_fill: entries under a boolean mask replaced by a constant.
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

// x [...], mask boolean broadcastable to [...] -> [...]
Var masked_fill(const Var& x, const Tensor& mask, double value) {
  ops::expect_floating(x.value(), "x");
  if (!mask.defined() || mask.dtype() != DType::boolean) {
    throw Error("mask", "a boolean tensor",
                mask.defined() ? std::string(dtype_name(mask.dtype())) : "an undefined tensor");
  }
  if (ops::broadcast_shapes(x.shape(), mask.shape(), "mask") != x.shape()) {
    throw Error("mask", "shape broadcastable to " + shape_string(x.shape()),
                shape_string(mask.shape()));
  }
  const Tensor m = ops::broadcast_to(mask, x.shape());
  const auto* filled = m.data_as<std::uint8_t>();
  const Tensor xv = x.value().contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  ops::dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* in = xv.data_as<T>();
    T* o = out.data_as<T>();
    // out = mask ? value : x
    for (std::int64_t n = 0; n < out.numel(); ++n) o[n] = filled[n] ? static_cast<T>(value) : in[n];
  });
  return detail::record(std::move(out), {&x}, [m](const Tensor& dout) {
    const Tensor g = dout.contiguous();
    Tensor dx = Tensor::empty(g.shape(), g.dtype());
    ops::dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const auto* filled = m.data_as<std::uint8_t>();
      const T* pg = g.data_as<T>();
      T* pd = dx.data_as<T>();
      for (std::int64_t n = 0; n < g.numel(); ++n) pd[n] = filled[n] ? T(0) : pg[n];
    });
    return std::vector<Tensor>{dx};
  });
}

}  // namespace qkv::autograd
