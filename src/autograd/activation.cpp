// exp, log, tanh, sigmoid, relu, gelu: element by element.
#include <cmath>
#include <vector>

#include "autograd/kernels.hpp"
#include "autograd/node.hpp"
#include "kernels/cpu/elementwise.hpp"
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
    return std::vector<Tensor>{kernels::zip3(
        g, xv, saved_out, [&](auto gi, auto xi, auto yi) { return gi * df(xi, yi); })};
  });
}

// x [...] -> [...]: out_i = f(x_i), with the backward dx_i = g_i * df(x_i, out_i).
template <class F, class DF>
Var unary(const Var& x, F f, DF df) {
  kernels::expect_floating(x.value(), "x");
  return record_unary(x, kernels::map(x.value(), f), df);
}

}  // namespace

// x [...] -> [...]
Var exp(const Var& x) {
  // out = exp(x)
  return unary(
      x, [](auto v) { return std::exp(v); }, [](auto, auto y) { return y; });
}

// x [...] -> [...]
Var log(const Var& x) {
  // out = log(x)
  return unary(
      x, [](auto v) { return std::log(v); }, [](auto v, auto) { return 1 / v; });
}

// x [...] -> [...]
Var tanh(const Var& x) {
  // out = tanh(x)
  const auto derivative = [](auto, auto y) { return 1 - y * y; };
  const Tensor& xv = x.value();
  if (xv.dtype() != DType::f32 || !xv.is_contiguous()) {
    return unary(
        x, [](auto v) { return std::tanh(v); }, derivative);
  }
  // f32 in one vectorized pass (kernels/cpu/elementwise.hpp); f64 keeps std::tanh, the
  // reference precision.
  Tensor out = Tensor::empty(xv.shape(), DType::f32);
  cpu_kernels::tanh_values(xv.data_as<float>(), xv.numel(), out.data_as<float>());
  return record_unary(x, std::move(out), derivative);
}

// x [...] -> [...]
Var sigmoid(const Var& x) {
  // out = 1 / (1 + exp(-x)), written so that neither branch overflows
  return unary(
      x,
      [](auto v) {
        using T = decltype(v);
        if (v >= 0) return T(1) / (T(1) + std::exp(-v));
        const T e = std::exp(v);
        return e / (T(1) + e);
      },
      [](auto, auto y) { return y * (1 - y); });
}

// x [...] -> [...]
Var relu(const Var& x) {
  const Tensor& xv = x.value();
  if ((xv.dtype() == DType::f32 || xv.dtype() == DType::f64) && xv.is_contiguous()) {
    // out = max(x, 0), and dx = g where out > 0: vector passes (kernels/cpu/elementwise.hpp)
    Tensor out = Tensor::empty(xv.shape(), xv.dtype());
    kernels::dispatch(xv.dtype(), [&](auto zero) {
      using T = decltype(zero);
      cpu_kernels::relu_values(xv.data_as<T>(), xv.numel(), out.data_as<T>());
    });
    const Tensor saved_out = out;
    return detail::record(std::move(out), {&x}, [saved_out](const Tensor& g) {
      const Tensor gc = g.contiguous();
      Tensor dx = Tensor::empty(gc.shape(), gc.dtype());
      kernels::dispatch(gc.dtype(), [&](auto zero) {
        using T = decltype(zero);
        cpu_kernels::relu_grad(gc.data_as<T>(), saved_out.data_as<T>(), gc.numel(),
                               dx.data_as<T>());
      });
      return std::vector<Tensor>{dx};
    });
  }
  // out = max(x, 0)
  return unary(
      x, [](auto v) { return v > 0 ? v : decltype(v)(0); },
      [](auto v, auto) { return v > 0 ? decltype(v)(1) : decltype(v)(0); });
}

// x [...] -> [...]
Var gelu(const Var& x, Gelu approximate) {
  constexpr double kInvSqrt2 = 0.70710678118654752440;
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  constexpr double kCubic = 0.044715;
  if (approximate == Gelu::exact) {
    // out = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2
    return unary(
        x, [](auto v) { return v * 0.5 * (1 + std::erf(v * kInvSqrt2)); },
        // d(x Phi(x))/dx = Phi(x) + x phi(x)
        [](auto v, auto) {
          const double d = v;
          return 0.5 * (1 + std::erf(d * kInvSqrt2)) + d * kInvSqrt2Pi * std::exp(-0.5 * d * d);
        });
  }
  // out = x (1 + tanh(u)) / 2, u = sqrt(2 / pi) (x + 0.044715 x^3)
  return unary(
      x,
      [](auto v) {
        const double d = v;
        return 0.5 * d * (1 + std::tanh(kSqrt2OverPi * (d + kCubic * d * d * d)));
      },
      // d/dx = (1 + t) / 2 + x (1 - t^2) / 2 * du/dx, du/dx = sqrt(2 / pi) (1 + 3 * 0.044715 x^2)
      [](auto v, auto) {
        const double d = v;
        const double t = std::tanh(kSqrt2OverPi * (d + kCubic * d * d * d));
        return 0.5 * (1 + t) + 0.5 * d * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kCubic * d * d);
      });
}

}  // namespace qkv::autograd
