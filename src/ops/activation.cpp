// exp, log, tanh, sigmoid, relu, gelu: element by element.
#include <cmath>

#include "kernels/cpu/elementwise.hpp"
#include "ops/parallel.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/ops.hpp"

namespace qkv::ops {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kCubic = 0.044715;

// x [...] -> [...]: f(x_i) for every element.
template <class F>
Tensor unary(const Tensor& x, F f) {
  expect_floating(x, "x");
  return map(x, f);
}

}  // namespace

// x [...] -> [...]
Tensor exp(const Tensor& x) {
  return unary(x, [](auto v) { return std::exp(v); });
}

// x [...] -> [...]
Tensor log(const Tensor& x) {
  return unary(x, [](auto v) { return std::log(v); });
}

// x [...] -> [...]
Tensor tanh(const Tensor& x) {
  if (!x.defined() || x.dtype() != DType::f32 || !x.is_contiguous()) {
    return unary(x, [](auto v) { return std::tanh(v); });
  }
  // f32 in one vectorized pass (kernels/cpu/elementwise.hpp); f64 keeps std::tanh, the
  // reference precision.
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  kernels::cpu::tanh_values(x.data_as<float>(), x.numel(), out.data_as<float>());
  return out;
}

// x [...] -> [...]
Tensor sigmoid(const Tensor& x) {
  // 1 / (1 + exp(-x)), written so that neither branch overflows
  return unary(x, [](auto v) {
    using T = decltype(v);
    if (v >= 0) return T(1) / (T(1) + std::exp(-v));
    const T e = std::exp(v);
    return e / (T(1) + e);
  });
}

// x [...] -> [...]
Tensor relu(const Tensor& x) {
  expect_floating(x, "x");
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  // out = max(x, 0): a vector pass (kernels/cpu/elementwise.hpp)
  dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for_range(xc.numel(), kChunkElements, 16, [&](std::int64_t begin, std::int64_t end) {
      kernels::cpu::relu_values(xc.data_as<T>() + begin, end - begin, out.data_as<T>() + begin);
    });
  });
  return out;
}

// x [...] -> [...]
Tensor gelu(const Tensor& x, Gelu approximate) {
  if (approximate == Gelu::exact) {
    // x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2
    return unary(x, [](auto v) { return v * 0.5 * (1 + std::erf(v * kInvSqrt2)); });
  }
  // x (1 + tanh(u)) / 2, u = sqrt(2 / pi) (x + 0.044715 x^3)
  return unary(x, [](auto v) {
    const double d = v;
    return 0.5 * d * (1 + std::tanh(kSqrt2OverPi * (d + kCubic * d * d * d)));
  });
}

}  // namespace qkv::ops
