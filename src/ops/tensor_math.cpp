#include "ops/tensor_math.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cpu/blas.hpp"

namespace qkv::ops {

void expect_floating(const Tensor& x, const char* argument) {
  if (!x.defined()) throw Error(argument, "a defined f32 or f64 tensor", "an undefined tensor");
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64) {
    throw Error(argument,
                is_half(x.dtype()) ? "dtype f32 or f64 (this op does not take bf16 or f16: cast "
                                     "to f32, or compute under an Autocast)"
                                   : "dtype f32 or f64",
                std::string(dtype_name(x.dtype())));
  }
}

void expect_any_floating(const Tensor& x, const char* argument) {
  if (!x.defined()) throw Error(argument, "a defined floating tensor", "an undefined tensor");
  if (!is_floating(x.dtype())) {
    throw Error(argument, "dtype f32, f64, bf16 or f16", std::string(dtype_name(x.dtype())));
  }
}

void expect_same_dtype(const Tensor& a, const Tensor& b, const char* argument) {
  if (a.dtype() != b.dtype()) {
    throw Error(argument, "dtype " + std::string(dtype_name(a.dtype())),
                std::string(dtype_name(b.dtype())));
  }
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* argument_b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t sa = d < rank - a.size() ? 1 : a[d - (rank - a.size())];
    const std::int64_t sb = d < rank - b.size() ? 1 : b[d - (rank - b.size())];
    if (sa != sb && sa != 1 && sb != 1) {
      throw Error(argument_b, "shape broadcastable with " + shape_string(a), shape_string(b));
    }
    out[d] = sa == 1 ? sb : sa;
  }
  return out;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  return x.shape() == shape ? x.contiguous() : x.expand(shape).contiguous();
}

// Each element of g is added into the element of `out` its index maps to, through strides that
// are 0 along the summed dimensions; the walk is an odometer over g's row-major order.
Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  // Summing over leading dimensions only (a bias's gradient [N] from [B, T, N]): rows of the
  // contiguous gradient added into one row, a loop the compiler vectorizes.
  std::size_t first = 0;
  while (first < shape.size() && shape[first] == 1) ++first;
  const std::size_t kept = shape.size() - first;
  if (kept <= g.shape().size() &&
      std::equal(shape.begin() + static_cast<std::ptrdiff_t>(first), shape.end(),
                 g.shape().end() - static_cast<std::ptrdiff_t>(kept))) {
    Tensor out = Tensor::zeros(shape, g.dtype());
    std::int64_t period = 1;
    for (std::size_t d = first; d < shape.size(); ++d) period *= shape[d];
    if (period == 0) return out;
    dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const Tensor gc = g.contiguous();
      const T* in = gc.data_as<T>();
      T* o = out.data_as<T>();
      for (std::int64_t start = 0; start < g.numel(); start += period) {
        for (std::int64_t j = 0; j < period; ++j) o[j] += in[start + j];
      }
    });
    return out;
  }
  const std::size_t rank = g.shape().size();
  const std::size_t lead = rank - shape.size();
  Tensor out = Tensor::zeros(shape, g.dtype());
  Shape strides(rank, 0);
  std::int64_t running = 1;
  for (std::size_t d = rank; d-- > lead;) {
    const std::int64_t s = shape[d - lead];
    strides[d] = (s == 1 && g.shape()[d] != 1) ? 0 : running;
    running *= s;
  }
  dispatch(g.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const Tensor gc = g.contiguous();
    const T* in = gc.data_as<T>();
    T* o = out.data_as<T>();
    if (g.numel() == 0) return;
    std::vector<std::int64_t> index(rank, 0);
    std::int64_t offset = 0;
    for (std::int64_t n = 0; n < g.numel(); ++n) {
      o[offset] += in[n];
      for (std::size_t d = rank; d-- > 0;) {
        offset += strides[d];
        if (++index[d] < g.shape()[d]) break;
        offset -= strides[d] * g.shape()[d];
        index[d] = 0;
      }
    }
  });
  return out;
}

Lanes lanes(const Shape& shape, std::int64_t dim) {
  Lanes l;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(shape.size()); ++d) {
    if (d < dim) l.outer *= shape[d];
    if (d == dim) l.n = shape[d];
    if (d > dim) l.inner *= shape[d];
  }
  return l;
}

void gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
          const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C,
          std::int64_t ldc) {
  qkv::kernels::cpu::blas_gemm(transpose_a, transpose_b, M, N, K, A, lda, B, ldb, false, C, ldc);
}

void gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
          const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double* C,
          std::int64_t ldc) {
  qkv::kernels::cpu::blas_gemm(transpose_a, transpose_b, M, N, K, A, lda, B, ldb, false, C, ldc);
}

}  // namespace qkv::ops
