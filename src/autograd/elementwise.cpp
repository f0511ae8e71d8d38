// add, sub, mul, div with numpy broadcasting, and their constant and operator forms.
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {
namespace {

// Checks a and b for the differentiable forms: f32 or f64 (the qkv::ops forms also take bf16 and
// f16), one dtype.
void expect_operands(const Var& a, const Var& b) {
  ops::expect_floating(a.value(), "a");
  ops::expect_floating(b.value(), "b");
  ops::expect_same_dtype(a.value(), b.value(), "b");
}

}  // namespace

// a [...], b [...] -> [broadcast]
Var add(const Var& a, const Var& b) {
  expect_operands(a, b);
  // out = a + b
  Tensor out = ops::add(a.value(), b.value());
  const Shape a_shape = a.shape(), b_shape = b.shape();
  return detail::record(std::move(out), {&a, &b}, [=](const Tensor& g) {
    return std::vector<Tensor>{ops::sum_to(g, a_shape), ops::sum_to(g, b_shape)};
  });
}

// a [...], b [...] -> [broadcast]
Var sub(const Var& a, const Var& b) {
  expect_operands(a, b);
  // out = a - b
  Tensor out = ops::sub(a.value(), b.value());
  const Shape a_shape = a.shape(), b_shape = b.shape();
  return detail::record(std::move(out), {&a, &b}, [=](const Tensor& g) {
    const Tensor minus_g = ops::map(g, [](auto v) { return -v; });
    return std::vector<Tensor>{ops::sum_to(g, a_shape), ops::sum_to(minus_g, b_shape)};
  });
}

// a [...], b [...] -> [broadcast]
Var mul(const Var& a, const Var& b) {
  expect_operands(a, b);
  // out = a * b
  Tensor out = ops::mul(a.value(), b.value());
  const Shape shape = out.shape(), a_shape = a.shape(), b_shape = b.shape();
  const Tensor av = a.value(), bv = b.value();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return detail::record(std::move(out), {&a, &b}, [=](const Tensor& g) {
    // da = g * b, db = g * a, each summed back to its input's shape
    const auto times = [](auto p, auto q) { return p * q; };
    return std::vector<Tensor>{
        need_a ? ops::sum_to(ops::zip(g, ops::broadcast_to(bv, shape), times), a_shape) : Tensor(),
        need_b ? ops::sum_to(ops::zip(g, ops::broadcast_to(av, shape), times), b_shape) : Tensor()};
  });
}

// a [...], b [...] -> [broadcast]
Var div(const Var& a, const Var& b) {
  expect_operands(a, b);
  // out = a / b
  Tensor out = ops::div(a.value(), b.value());
  const Shape shape = out.shape(), a_shape = a.shape(), b_shape = b.shape();
  const Tensor av = a.value(), bv = b.value();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return detail::record(std::move(out), {&a, &b}, [=](const Tensor& g) {
    // d(a / b)/da = 1 / b, d(a / b)/db = -a / b^2
    const Tensor b_full = ops::broadcast_to(bv, shape);
    return std::vector<Tensor>{
        need_a ? ops::sum_to(ops::zip(g, b_full, [](auto p, auto q) { return p / q; }), a_shape)
               : Tensor(),
        need_b ? ops::sum_to(ops::zip3(g, ops::broadcast_to(av, shape), b_full,
                                       [](auto p, auto q, auto r) { return -p * q / (r * r); }),
                             b_shape)
               : Tensor()};
  });
}

// x [...] -> [...]
Var add(const Var& x, double c) {
  // out = x + c
  Tensor out = ops::add(x.value(), c);
  return detail::record(std::move(out), {&x},
                        [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

// x [...] -> [...]
Var mul(const Var& x, double c) {
  // out = x * c
  Tensor out = ops::mul(x.value(), c);
  return detail::record(std::move(out), {&x}, [c](const Tensor& g) {
    return std::vector<Tensor>{ops::map(g, [c](auto v) { return v * c; })};
  });
}

Var neg(const Var& x) { return mul(x, -1.0); }

Var operator+(const Var& a, const Var& b) { return add(a, b); }
Var operator-(const Var& a, const Var& b) { return sub(a, b); }
Var operator*(const Var& a, const Var& b) { return mul(a, b); }
Var operator/(const Var& a, const Var& b) { return div(a, b); }
Var operator+(const Var& x, double c) { return add(x, c); }
Var operator-(const Var& x, double c) { return add(x, -c); }
Var operator*(const Var& x, double c) { return mul(x, c); }
Var operator*(double c, const Var& x) { return mul(x, c); }
Var operator/(const Var& x, double c) { return mul(x, 1.0 / c); }
Var operator-(const Var& x) { return neg(x); }

}  // namespace qkv::autograd
