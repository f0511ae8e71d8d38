// matmul and batched matmul, through the BLAS.
#include <optional>
#include <utility>
#include <vector>

#include "autograd/kernels.hpp"
#include "autograd/node.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {
namespace {

std::int64_t numel_of(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t s : shape) n *= s;
  return n;
}

// a [P, M, K] (or its transpose per flag), b likewise, both contiguous -> c [P, M, N]: one gemm
// per batch entry. b_batched false: one b [K, N] for every batch entry.
template <class T>
void batched_gemm(bool ta, bool tb, std::int64_t P, std::int64_t M, std::int64_t N, std::int64_t K,
                  const T* a, const T* b, bool b_batched, T* c) {
  const std::int64_t lda = ta ? M : K;
  const std::int64_t ldb = tb ? K : N;
  for (std::int64_t p = 0; p < P; ++p) {
    kernels::gemm(ta, tb, M, N, K, a + p * M * K, lda, b + (b_batched ? p * K * N : 0), ldb,
                  c + p * M * N, N);
  }
}

// a [..., M, K], b [..., K, N] (f32, f64, or both bf16 or both f16: checked) -> [..., M, N]. Half
// a and b are widened to f32 for the BLAS (exactly) and the result rounded once; the backward
// keeps the half values, widens them again, and rounds da and db once.
Var matmul_blas(const Var& a, const Var& b) {
  if (a.dim() < 2) throw Error("a", "at least 2 dimensions [..., M, K]", a.value().describe());
  if (b.dim() < 2) throw Error("b", "at least 2 dimensions [..., K, N]", b.value().describe());
  const std::int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  if (b.size(-2) != K) {
    throw Error("b", std::to_string(K) + " rows (the columns of a " + shape_string(a.shape()) + ")",
                shape_string(b.shape()));
  }
  const Shape a_batch(a.shape().begin(), a.shape().end() - 2);
  const Shape b_batch(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = kernels::broadcast_shapes(a_batch, b_batch, "b");
  const std::int64_t P = numel_of(batch);
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Shape a_full = batch, b_full = batch;
  a_full.insert(a_full.end(), {M, K});
  b_full.insert(b_full.end(), {K, N});
  // A shared b [K, N] (a linear layer) multiplies all of a as one [P * M, K] matrix.
  const bool shared_b = numel_of(b_batch) == 1 && a_batch == batch;
  const DType dtype = a.dtype();
  const bool half = kernels::is_half(dtype);
  const DType compute = half ? DType::f32 : dtype;

  // A shared b that is the transpose of a contiguous [N, K] matrix (a Linear layer's W^T) is read
  // in place, the gemm transposing it: copying W made up 40% of a decoder step at one token
  // (perf of qkv translate, 2026-11-23).
  const bool b_transposed = shared_b && b.dim() == 2 && !b.value().is_contiguous() &&
                            b.value().transpose(0, 1).is_contiguous();
  // The gemm operands from a's and b's values: contiguous, broadcast, in the compute dtype (to()
  // returns the tensor itself where the dtype is already that).
  const auto operands = [=](const Tensor& a_value, const Tensor& b_value) {
    return std::pair<Tensor, Tensor>{kernels::broadcast_to(a_value.to(compute), a_full),
                                     b_transposed ? b_value.transpose(0, 1).to(compute)  // [N, K]
                                     : shared_b
                                         ? b_value.reshape({K, N}).to(compute).contiguous()
                                         : kernels::broadcast_to(b_value.to(compute), b_full)};
  };
  // Named Tensors, not a structured binding: the lambdas below capture them (clang 14 cannot
  // capture a binding).
  const std::pair<Tensor, Tensor> forward_operands = operands(a.value(), b.value());
  const Tensor& av = forward_operands.first;
  const Tensor& bv = forward_operands.second;
  Tensor out = Tensor::empty(out_shape, compute);
  kernels::dispatch(compute, [&](auto zero) {
    using T = decltype(zero);
    // out[p] = a[p] @ b[p]
    if (b_transposed) {
      kernels::gemm(false, true, P * M, N, K, av.data_as<T>(), K, bv.data_as<T>(), K,
                    out.data_as<T>(), N);
    } else if (shared_b) {
      kernels::gemm(false, false, P * M, N, K, av.data_as<T>(), K, bv.data_as<T>(), N,
                    out.data_as<T>(), N);
    } else {
      batched_gemm<T>(false, false, P, M, N, K, av.data_as<T>(), bv.data_as<T>(), true,
                      out.data_as<T>());
    }
  });

  const Shape a_shape = a.shape(), b_shape = b.shape();
  // The backward keeps the half values (half the memory of their f32 widening), or the f32 and
  // f64 operands as the gemm read them.
  const Tensor saved_a = half ? a.value() : av, saved_b = half ? b.value() : bv;
  return detail::record(half ? out.to(dtype) : std::move(out), {&a, &b}, [=](const Tensor& dout) {
    const std::pair<Tensor, Tensor> backward_operands =
        half ? operands(saved_a, saved_b) : std::pair{saved_a, saved_b};
    const Tensor& av = backward_operands.first;
    const Tensor& bv = backward_operands.second;
    const Tensor g = dout.to(compute).contiguous();
    Tensor da = Tensor::empty(a_full, compute);
    Tensor db = Tensor::empty(shared_b ? Shape{K, N} : b_full, compute);
    kernels::dispatch(compute, [&](auto zero) {
      using T = decltype(zero);
      if (shared_b) {
        // out = a @ b with a as [P * M, K]: da = dout @ b^T, db = a^T @ dout
        if (b_transposed) {  // bv is b^T [N, K] already
          kernels::gemm(false, false, P * M, K, N, g.data_as<T>(), N, bv.data_as<T>(), K,
                        da.data_as<T>(), K);
        } else {
          kernels::gemm(false, true, P * M, K, N, g.data_as<T>(), N, bv.data_as<T>(), N,
                        da.data_as<T>(), K);
        }
        kernels::gemm(true, false, K, N, P * M, av.data_as<T>(), K, g.data_as<T>(), N,
                      db.data_as<T>(), N);
      } else {
        // out[p] = a[p] @ b[p]: da[p] = dout[p] @ b[p]^T, db[p] = a[p]^T @ dout[p]
        batched_gemm<T>(false, true, P, M, K, N, g.data_as<T>(), bv.data_as<T>(), true,
                        da.data_as<T>());
        batched_gemm<T>(true, false, P, K, N, M, av.data_as<T>(), g.data_as<T>(), true,
                        db.data_as<T>());
      }
    });
    // Summed over the broadcast dimensions in the compute dtype, then rounded once.
    return std::vector<Tensor>{
        kernels::sum_to(da, a_shape).to(dtype),
        kernels::sum_to(db.reshape(shared_b ? b_shape : b_full), b_shape).to(dtype)};
  });
}

}  // namespace

// a [..., M, K], b [..., K, N] -> [..., M, N]
Var matmul(const Var& a, const Var& b) {
  kernels::expect_any_floating(a.value(), "a");
  kernels::expect_any_floating(b.value(), "b");
  kernels::expect_same_dtype(a.value(), b.value(), "b");
  const std::optional<DType> autocast = autocast_dtype();
  if (autocast && a.dtype() == DType::f32) {
    // y = matmul(a, b) in the autocast dtype: inputs and result rounded to it, y in f32
    return cast(matmul(cast(a, *autocast), cast(b, *autocast)), DType::f32);
  }
  return matmul_blas(a, b);
}

}  // namespace qkv::autograd
