#pragma once

#include <cstdint>
#include <vector>

#include "qkv/tensor.hpp"

// Plain tensor math: functions of tensors that return fresh contiguous tensors and record
// nothing. Autograd's ops compute their forward with these and add the backward; nn, models,
// tools and user code call them directly where no gradient is wanted (an average over heads of
// attention weights, a heatmap's panels), with no Var and no NoGrad scope. f32 or f64 unless
// said otherwise; every input of one dtype. Bad arguments throw qkv::Error naming the argument,
// the expected and the actual value, before any work.
namespace qkv::ops {

// --- arithmetic.cpp -------------------------------------------------------------------------
// a [...], b [...] -> [broadcast of the two shapes, as numpy]; bf16 and f16 computed in f32 and
// rounded once. A side that only repeats along leading dimensions (a bias [N] against [B, T, N])
// is read with its period, not copied.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// x [...] -> x + c, x * c [...]
Tensor add(const Tensor& x, double c);
Tensor mul(const Tensor& x, double c);

// --- reduce.cpp -----------------------------------------------------------------------------
// x [...] -> [] (all elements) or x with dimension dim removed (kept as 1 with keepdim). Sums in
// f64, rounded once. max of an empty dimension throws.
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor max(const Tensor& x, std::int64_t dim, bool keepdim = false);

// --- activation.cpp -------------------------------------------------------------------------
// x [...] -> [...], element by element.
enum class Gelu : std::uint8_t {
  exact,  // x Phi(x) = x (1 + erf(x / sqrt 2)) / 2: PyTorch's nn.GELU() default
  tanh,   // x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2: nn.GELU(approximate="tanh")
};
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);  // 1 / (1 + exp(-x)), neither branch overflowing
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, Gelu approximate = Gelu::exact);

// --- softmax.cpp ----------------------------------------------------------------------------
// x [...] -> [...], normalized along dim, the row maximum subtracted. A row that is -inf
// everywhere (every entry masked) gives softmax 0 and log_softmax -inf, never NaN.
Tensor softmax(const Tensor& x, std::int64_t dim);
Tensor log_softmax(const Tensor& x, std::int64_t dim);

// --- layer_norm.cpp -------------------------------------------------------------------------
// x [..., *normalized_shape], weight and bias [*normalized_shape] (either may be undefined) ->
// (x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape dimensions,
// with the biased variance (PyTorch's layer_norm).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// --- matmul.cpp -----------------------------------------------------------------------------
// a [..., M, K], b [..., K, N] -> [..., M, N]; both at least 2-D, batch dimensions broadcast as
// in numpy. Through the BLAS. bf16 and f16 (both of one dtype): products and sums in f32, the
// result rounded once.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., K], weight [N, K], bias [N] (or undefined) -> x W^T + b [..., N] (PyTorch's F.linear),
// W read in place; bf16 and f16 as matmul.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// --- shape.cpp ------------------------------------------------------------------------------
// xs [..., n_i, ...] (equal elsewhere, one dtype, any of f64, f32, bf16, f16) ->
// [..., sum n_i, ...] along dim.
Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim);
// The valid rows of a padded batch, packed one sequence after another, and back (PyTorch's
// nested tensors, FlashAttention's varlen layout): a batch of B sequences padded to T holds
// n = sum(lengths) tokens, and the row-wise parts of a Transformer layer need only those.
// x [B, T, ...], lengths [B] in [0, T] -> [n, ...]: rows (b, t < lengths[b]) in order.
Tensor pack_rows(const Tensor& x, const std::vector<std::int64_t>& lengths);
// x [n, ...] -> [B, T, ...]: pack_rows undone, zeros past each length.
Tensor unpack_rows(const Tensor& x, const std::vector<std::int64_t>& lengths, std::int64_t T);

}  // namespace qkv::ops
