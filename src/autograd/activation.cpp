// exp, log, tanh, sigmoid, relu, gelu: element by element.
#include <cmath>
#include <vector>

#include "autograd/node.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "ops/parallel.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

namespace cpu_kernels = qkv::kernels::cpu;

namespace {

// x [...] and out [...] = f(x), computed by the caller -> the Var of out, with the backward
// dx_i = g_i * df(x_i, out_i).
template <class DF>
Var record_unary(const Var& x, Tensor out, DF df) {
  const Tensor xv = x.value();
  const Tensor saved_out = out;
  return detail::record(std::move(out), {&x}, [=](const Tensor& g) {
    return std::vector<Tensor>{
        ops::zip3(g, xv, saved_out, [&](auto gi, auto xi, auto yi) { return gi * df(xi, yi); })};
  });
}

}  // namespace

// x [...] -> [...]
Var exp(const Var& x) {
  // out = exp(x)
  return record_unary(x, ops::exp(x.value()), [](auto, auto y) { return y; });
}

// x [...] -> [...]
Var log(const Var& x) {
  // out = log(x)
  return record_unary(x, ops::log(x.value()), [](auto v, auto) { return 1 / v; });
}

// x [...] -> [...]
Var tanh(const Var& x) {
  // out = tanh(x)
  return record_unary(x, ops::tanh(x.value()), [](auto, auto y) { return 1 - y * y; });
}

// x [...] -> [...]
Var sigmoid(const Var& x) {
  // out = 1 / (1 + exp(-x))
  return record_unary(x, ops::sigmoid(x.value()), [](auto, auto y) { return y * (1 - y); });
}

// x [...] -> [...]
Var relu(const Var& x) {
  // out = max(x, 0)
  Tensor out = ops::relu(x.value());
  const Tensor saved_out = out;
  return detail::record(std::move(out), {&x}, [saved_out](const Tensor& g) {
    // dx = g where out > 0 (0 at x = 0, as PyTorch): a vector pass (kernels/cpu/elementwise.hpp)
    const Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(gc.shape(), gc.dtype());
    ops::dispatch(gc.dtype(), [&](auto zero) {
      using T = decltype(zero);
      ops::for_range(
          gc.numel(), ops::kChunkElements, 16, [&](std::int64_t begin, std::int64_t end) {
            cpu_kernels::relu_grad(gc.data_as<T>() + begin, saved_out.data_as<T>() + begin,
                                   end - begin, dx.data_as<T>() + begin);
          });
    });
    return std::vector<Tensor>{dx};
  });
}

// x [...] -> [...]
Var gelu(const Var& x, Gelu approximate) {
  constexpr double kInvSqrt2 = 0.70710678118654752440;
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  constexpr double kCubic = 0.044715;
  Tensor out = ops::gelu(x.value(), approximate);
  if (approximate == Gelu::exact) {
    // out = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2: d(x Phi(x))/dx = Phi(x) + x phi(x)
    return record_unary(x, std::move(out), [](auto v, auto) {
      const double d = v;
      return 0.5 * (1 + std::erf(d * kInvSqrt2)) + d * kInvSqrt2Pi * std::exp(-0.5 * d * d);
    });
  }
  // out = x (1 + tanh(u)) / 2, u = sqrt(2 / pi) (x + 0.044715 x^3):
  // d/dx = (1 + t) / 2 + x (1 - t^2) / 2 * du/dx, du/dx = sqrt(2 / pi) (1 + 3 * 0.044715 x^2)
  return record_unary(x, std::move(out), [](auto v, auto) {
    const double d = v;
    const double t = std::tanh(kSqrt2OverPi * (d + kCubic * d * d * d));
    return 0.5 * (1 + t) + 0.5 * d * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kCubic * d * d);
  });
}

}  // namespace qkv::autograd
