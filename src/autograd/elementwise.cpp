// add, sub, mul, div with numpy broadcasting, and their constant and operator forms.
#include <algorithm>
#include <vector>

#include "autograd/kernels.hpp"
#include "autograd/node.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {
namespace {

struct Broadcast {
  Shape shape;  // of the result
  Tensor a, b;  // the values broadcast to it, contiguous
};

// a [...], b [...] -> both broadcast to their common shape.
Broadcast broadcast(const Var& a, const Var& b) {
  kernels::expect_floating(a.value(), "a");
  kernels::expect_floating(b.value(), "b");
  kernels::expect_same_dtype(a.value(), b.value(), "b");
  Broadcast r;
  r.shape = kernels::broadcast_shapes(a.shape(), b.shape(), "b");
  r.a = kernels::broadcast_to(a.value(), r.shape);
  r.b = kernels::broadcast_to(b.value(), r.shape);
  return r;
}

// Whether x, broadcast to shape, only repeats along leading dimensions: its shape, leading 1s
// dropped, is a suffix of shape (a bias [N] against [B, T, N], positions [T, E] against [B, T, E]).
bool repeats(const Shape& x, const Shape& shape) {
  std::size_t first = 0;
  while (first < x.size() && x[first] == 1) ++first;
  const std::size_t n = x.size() - first;
  return n <= shape.size() && std::equal(x.begin() + static_cast<std::ptrdiff_t>(first), x.end(),
                                         shape.end() - static_cast<std::ptrdiff_t>(n));
}

// a [...], b [...] -> f(a, b) [broadcast]. When each side either has the broadcast shape or
// repeats along leading dimensions, the repeating side is read with its period instead of being
// materialized at the full size: the bias add of every Linear layer copied [B, T, N] otherwise
// (7% of a translator training step, perf, 2026-11-23).
template <class F>
Tensor zip_broadcast(const Var& a, const Var& b, F f) {
  kernels::expect_floating(a.value(), "a");
  kernels::expect_floating(b.value(), "b");
  kernels::expect_same_dtype(a.value(), b.value(), "b");
  const Shape shape = kernels::broadcast_shapes(a.shape(), b.shape(), "b");
  if (!repeats(a.shape(), shape) || !repeats(b.shape(), shape)) {
    return kernels::zip(kernels::broadcast_to(a.value(), shape),
                        kernels::broadcast_to(b.value(), shape), f);
  }
  const Tensor x = a.value().contiguous(), y = b.value().contiguous();
  Tensor out = Tensor::empty(shape, a.dtype());
  const std::int64_t n = out.numel(), period = std::min(x.numel(), y.numel());
  if (n == 0) return out;
  kernels::dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.data_as<T>();
    const T* yp = y.data_as<T>();
    T* o = out.data_as<T>();
    const bool x_full = x.numel() == n, y_full = y.numel() == n;
    for (std::int64_t start = 0; start < n; start += period) {
      const T* xs = x_full ? xp + start : xp;
      const T* ys = y_full ? yp + start : yp;
      T* os = o + start;
      for (std::int64_t j = 0; j < period; ++j) os[j] = f(xs[j], ys[j]);
    }
  });
  return out;
}

}  // namespace

// a [...], b [...] -> [broadcast]
Var add(const Var& a, const Var& b) {
  // out = a + b
  Tensor out = zip_broadcast(a, b, [](auto p, auto q) { return p + q; });
  const Shape a_shape = a.shape(), b_shape = b.shape();
  return detail::record(std::move(out), {&a, &b}, [=](const Tensor& g) {
    return std::vector<Tensor>{kernels::sum_to(g, a_shape), kernels::sum_to(g, b_shape)};
  });
}

// a [...], b [...] -> [broadcast]
Var sub(const Var& a, const Var& b) {
  // out = a - b
  Tensor out = zip_broadcast(a, b, [](auto p, auto q) { return p - q; });
  const Shape a_shape = a.shape(), b_shape = b.shape();
  return detail::record(std::move(out), {&a, &b}, [=](const Tensor& g) {
    const Tensor minus_g = kernels::map(g, [](auto v) { return -v; });
    return std::vector<Tensor>{kernels::sum_to(g, a_shape), kernels::sum_to(minus_g, b_shape)};
  });
}

// a [...], b [...] -> [broadcast]
Var mul(const Var& a, const Var& b) {
  const Broadcast x = broadcast(a, b);
  // out = a * b
  Tensor out = kernels::zip(x.a, x.b, [](auto p, auto q) { return p * q; });
  const Shape a_shape = a.shape(), b_shape = b.shape();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return detail::record(std::move(out), {&a, &b}, [=](const Tensor& g) {
    const auto times = [](auto p, auto q) { return p * q; };
    return std::vector<Tensor>{
        need_a ? kernels::sum_to(kernels::zip(g, x.b, times), a_shape) : Tensor(),
        need_b ? kernels::sum_to(kernels::zip(g, x.a, times), b_shape) : Tensor()};
  });
}

// a [...], b [...] -> [broadcast]
Var div(const Var& a, const Var& b) {
  const Broadcast x = broadcast(a, b);
  // out = a / b
  Tensor out = kernels::zip(x.a, x.b, [](auto p, auto q) { return p / q; });
  const Shape a_shape = a.shape(), b_shape = b.shape();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return detail::record(std::move(out), {&a, &b}, [=](const Tensor& g) {
    // d(a / b)/da = 1 / b, d(a / b)/db = -a / b^2
    return std::vector<Tensor>{
        need_a
            ? kernels::sum_to(kernels::zip(g, x.b, [](auto p, auto q) { return p / q; }), a_shape)
            : Tensor(),
        need_b ? kernels::sum_to(
                     kernels::zip3(g, x.a, x.b,
                                   [](auto p, auto q, auto r) { return -p * q / (r * r); }),
                     b_shape)
               : Tensor()};
  });
}

// x [...] -> [...]
Var add(const Var& x, double c) {
  kernels::expect_floating(x.value(), "x");
  // out = x + c
  Tensor out = kernels::map(x.value(), [c](auto v) { return v + c; });
  return detail::record(std::move(out), {&x},
                        [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

// x [...] -> [...]
Var mul(const Var& x, double c) {
  kernels::expect_floating(x.value(), "x");
  // out = x * c
  Tensor out = kernels::map(x.value(), [c](auto v) { return v * c; });
  return detail::record(std::move(out), {&x}, [c](const Tensor& g) {
    return std::vector<Tensor>{kernels::map(g, [c](auto v) { return v * c; })};
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
