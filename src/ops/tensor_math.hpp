#pragma once

// The helpers qkv::ops (qkv/ops.hpp) and autograd's rules are written in: argument checks,
// dtype dispatch, broadcasting, element loops, lanes along a dimension, the BLAS.
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "core/dims.hpp"
#include "qkv/error.hpp"
#include "qkv/ops.hpp"
#include "qkv/tensor.hpp"

namespace qkv::ops {

// Throws unless x is defined and f32 or f64.
void expect_floating(const Tensor& x, const char* argument);
// Throws unless x is defined and of a floating dtype: f32, f64, bf16 or f16.
void expect_any_floating(const Tensor& x, const char* argument);
// Whether dtype is one of the 16-bit floating types (bf16, f16).
inline bool is_half(DType dtype) { return dtype == DType::bf16 || dtype == DType::f16; }
// Throws unless b has a's dtype.
void expect_same_dtype(const Tensor& a, const Tensor& b, const char* argument);
using core::wrap_dim;

// Calls fn(T{}) with T the C++ type of dtype (float or double).
template <class Fn>
decltype(auto) dispatch(DType dtype, Fn&& fn) {
  if (dtype == DType::f64) return fn(double{});
  return fn(float{});
}

// The numpy broadcast of a and b (named `argument_b` in the error).
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* argument_b);
// g [broadcast of shape] -> [shape]: the sum over the dimensions shape was broadcast along.
Tensor sum_to(const Tensor& g, const Shape& shape);
// x broadcast to shape, contiguous.
Tensor broadcast_to(const Tensor& x, const Shape& shape);

// fn(x_i) for every element, contiguous.
template <class Fn>
Tensor map(const Tensor& x, Fn&& fn) {
  return dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const Tensor xc = x.contiguous();
    Tensor out = Tensor::empty(x.shape(), x.dtype());
    const T* in = xc.data_as<T>();
    T* o = out.data_as<T>();
    for (std::int64_t n = 0; n < x.numel(); ++n) o[n] = static_cast<T>(fn(in[n]));
    return out;
  });
}

// fn(a_i, b_i) over a and b of one shape and dtype, contiguous.
template <class Fn>
Tensor zip(const Tensor& a, const Tensor& b, Fn&& fn) {
  return dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const Tensor ac = a.contiguous();
    const Tensor bc = b.contiguous();
    Tensor out = Tensor::empty(a.shape(), a.dtype());
    const T* pa = ac.data_as<T>();
    const T* pb = bc.data_as<T>();
    T* o = out.data_as<T>();
    for (std::int64_t n = 0; n < a.numel(); ++n) o[n] = static_cast<T>(fn(pa[n], pb[n]));
    return out;
  });
}

// fn(a_i, b_i, c_i) over three tensors of one shape and dtype, contiguous.
template <class Fn>
Tensor zip3(const Tensor& a, const Tensor& b, const Tensor& c, Fn&& fn) {
  return dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const Tensor ac = a.contiguous();
    const Tensor bc = b.contiguous();
    const Tensor cc = c.contiguous();
    Tensor out = Tensor::empty(a.shape(), a.dtype());
    const T* pa = ac.data_as<T>();
    const T* pb = bc.data_as<T>();
    const T* pc = cc.data_as<T>();
    T* o = out.data_as<T>();
    for (std::int64_t n = 0; n < a.numel(); ++n) o[n] = static_cast<T>(fn(pa[n], pb[n], pc[n]));
    return out;
  });
}

// A tensor seen as [outer, n, inner] around dimension dim: element (o, j, i) is at
// (o * n + j) * inner + i of the contiguous tensor.
struct Lanes {
  std::int64_t outer = 1, n = 1, inner = 1;
};
Lanes lanes(const Shape& shape, std::int64_t dim);
// fn(first, r) for every lane: its first element's flat index (o * n * inner + i, the others
// `inner` apart) and its index among the lanes (o * inner + i).
template <class Fn>
void for_each_lane(const Lanes& l, Fn&& fn) {
  for (std::int64_t o = 0; o < l.outer; ++o) {
    for (std::int64_t i = 0; i < l.inner; ++i) fn(o * l.n * l.inner + i, o * l.inner + i);
  }
}

// Row-major C = A B with op(A) [M, K], op(B) [K, N] (op transposes when asked); lda, ldb, ldc
// are the row strides of A, B and C as stored. C is overwritten. Through the BLAS.
void gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
          const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C,
          std::int64_t ldc);
void gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
          const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double* C,
          std::int64_t ldc);

}  // namespace qkv::ops
