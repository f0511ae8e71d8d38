// add, sub, mul, div with numpy broadcasting, and x + c, x * c.
#include <algorithm>

#include "ops/parallel.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/ops.hpp"

namespace qkv::ops {
namespace {

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
// bf16 and f16 compute in f32, rounded once.
template <class F>
Tensor zip_broadcast(const Tensor& a, const Tensor& b, F f) {
  expect_any_floating(a, "a");
  expect_any_floating(b, "b");
  expect_same_dtype(a, b, "b");
  if (is_half(a.dtype())) {
    return zip_broadcast(a.to(DType::f32), b.to(DType::f32), f).to(a.dtype());
  }
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "b");
  if (!repeats(a.shape(), shape) || !repeats(b.shape(), shape)) {
    return zip(broadcast_to(a, shape), broadcast_to(b, shape), f);
  }
  const Tensor x = a.contiguous(), y = b.contiguous();
  Tensor out = Tensor::empty(shape, a.dtype());
  const std::int64_t n = out.numel(), period = std::min(x.numel(), y.numel());
  if (n == 0) return out;
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.data_as<T>();
    const T* yp = y.data_as<T>();
    T* o = out.data_as<T>();
    const bool x_full = x.numel() == n, y_full = y.numel() == n;
    if (period == n) {  // one shape: chunks of elements
      for_range(n, kChunkElements, 16, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t j = begin; j < end; ++j) o[j] = f(xp[j], yp[j]);
      });
      return;
    }
    // rows of `period` elements, the repeating side read from its start in each
    for_range(n / period, rows_per_chunk(period), 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t row = begin; row < end; ++row) {
        const std::int64_t start = row * period;
        const T* xs = x_full ? xp + start : xp;
        const T* ys = y_full ? yp + start : yp;
        T* os = o + start;
        for (std::int64_t j = 0; j < period; ++j) os[j] = f(xs[j], ys[j]);
      }
    });
  });
  return out;
}

}  // namespace

// a [...], b [...] -> [broadcast]
Tensor add(const Tensor& a, const Tensor& b) {
  return zip_broadcast(a, b, [](auto p, auto q) { return p + q; });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return zip_broadcast(a, b, [](auto p, auto q) { return p - q; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return zip_broadcast(a, b, [](auto p, auto q) { return p * q; });
}
Tensor div(const Tensor& a, const Tensor& b) {
  return zip_broadcast(a, b, [](auto p, auto q) { return p / q; });
}

// x [...] -> [...]
Tensor add(const Tensor& x, double c) {
  expect_floating(x, "x");
  return map(x, [c](auto v) { return v + c; });
}
Tensor mul(const Tensor& x, double c) {
  expect_floating(x, "x");
  return map(x, [c](auto v) { return v * c; });
}

}  // namespace qkv::ops
