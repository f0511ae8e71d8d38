// dropout with Philox keep decisions, regenerated in the backward.
#include <string>
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"
#include "qkv/philox.hpp"

namespace qkv::autograd {
namespace {

// x [..., R, C] -> x * keep / (1 - p), keep(n, r, c) = dropout_keep(seed, offset, n, r, c, p).
// Applied to the gradient, the same expression is the backward.
Tensor apply_mask(const Tensor& x, double p, std::uint64_t seed, std::uint64_t offset) {
  const std::int64_t C = x.dim() >= 1 ? x.size(-1) : 1;
  const std::int64_t R = x.dim() >= 2 ? x.size(-2) : 1;
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  ops::dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* in = xc.data_as<T>();
    T* o = out.data_as<T>();
    const double scale = 1 / (1 - p);
    for (std::int64_t e = 0; e < x.numel(); ++e) {
      const auto c = static_cast<std::uint32_t>(e % C);
      const auto r = static_cast<std::uint32_t>(e / C % R);
      const auto n = static_cast<std::uint32_t>(e / C / R);
      o[e] = dropout_keep(seed, offset, n, r, c, p) ? static_cast<T>(in[e] * scale) : T(0);
    }
  });
  return out;
}

}  // namespace

// x [..., R, C] -> [..., R, C]
Var dropout(const Var& x, double p, std::uint64_t seed, std::uint64_t offset) {
  ops::expect_floating(x.value(), "x");
  if (!(p >= 0 && p < 1)) throw Error("p", "a probability in [0, 1)", std::to_string(p));
  // out = x * keep / (1 - p)
  Tensor out = apply_mask(x.value(), p, seed, offset);
  return detail::record(std::move(out), {&x}, [=](const Tensor& g) {
    // dx = g * keep / (1 - p), keep regenerated from (seed, offset)
    return std::vector<Tensor>{apply_mask(g, p, seed, offset)};
  });
}

}  // namespace qkv::autograd
