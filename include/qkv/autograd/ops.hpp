#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "qkv/attention.hpp"
#include "qkv/autograd/var.hpp"
#include "qkv/block_mask.hpp"
#include "qkv/flex.hpp"
#include "qkv/linear_attention.hpp"
#include "qkv/mod_values.hpp"
#include "qkv/ops.hpp"
#include "qkv/tensor.hpp"

// The differentiable ops: each computes its forward with qkv::ops (qkv/ops.hpp) and records its
// backward. Every op takes f32 or f64 Vars of one dtype (cast, matmul and attention
// also bf16 and f16) and returns a new Var; the result records its backward when grad is enabled
// and an input requires grad. Bad arguments throw qkv::Error naming the argument, the expected
// and the actual value, before any work.
namespace qkv::autograd {

// --- cast.cpp -------------------------------------------------------------------------------
// x [...] -> the same values in dtype (f64, f32, bf16 or f16; rounded to nearest even when
// narrower); the backward casts the gradient back to x's dtype. x itself when dtype is its own.
// The ops that take bf16 and f16 Vars are cast, matmul and attention; the others throw.
Var cast(const Var& x, DType dtype);

// --- matmul.cpp -----------------------------------------------------------------------------
// a [..., M, K], b [..., K, N] -> [..., M, N]; both at least 2-D, batch dimensions broadcast as
// in numpy (b [K, N] multiplies every matrix of a). Through the BLAS (sgemm, dgemm). bf16 and
// f16 (both of one dtype): products and sums in f32, the result rounded once, and the backward
// likewise (dA and dB rounded once). Under an Autocast, f32 a and b compute in its dtype.
Var matmul(const Var& a, const Var& b);

// --- affine.cpp -----------------------------------------------------------------------------
// PyTorch's F.linear: x [..., K], weight [N, K], bias [N] (optional) -> x W^T + b [..., N], one
// node (the bias written first and the product added onto it; the backward's dx = dy W, dW = dy^T
// x and db = the column sums of dy, W read in place where its rows are contiguous). f32 and f64;
// bf16, f16 and Autocast compute as matmul(x, W^T) + b.
Var linear(const Var& x, const Var& weight, const Var& bias = {});

// --- elementwise.cpp ------------------------------------------------------------------------
// a, b of shapes that broadcast as in numpy (aligned from the right, each dimension equal or 1)
// -> the broadcast shape. The backward sums over the broadcast dimensions.
Var add(const Var& a, const Var& b);
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var div(const Var& a, const Var& b);
// x [...] with a constant c -> [...].
Var add(const Var& x, double c);
Var mul(const Var& x, double c);
Var neg(const Var& x);

Var operator+(const Var& a, const Var& b);
Var operator-(const Var& a, const Var& b);
Var operator*(const Var& a, const Var& b);
Var operator/(const Var& a, const Var& b);
Var operator+(const Var& x, double c);
Var operator-(const Var& x, double c);
Var operator*(const Var& x, double c);
Var operator*(double c, const Var& x);
Var operator/(const Var& x, double c);
Var operator-(const Var& x);

// --- reduce.cpp -----------------------------------------------------------------------------
// x [...] -> [] (all elements) or x with dimension dim removed (kept as 1 with keepdim).
// max sends the gradient to the maximum; ties share it equally (PyTorch's amax).
Var sum(const Var& x);
Var sum(const Var& x, std::int64_t dim, bool keepdim = false);
Var mean(const Var& x);
Var mean(const Var& x, std::int64_t dim, bool keepdim = false);
Var max(const Var& x);
Var max(const Var& x, std::int64_t dim, bool keepdim = false);

// --- activation.cpp -------------------------------------------------------------------------
// x [...] -> [...], element by element.
using Gelu = ops::Gelu;  // exact (nn.GELU()) or tanh (nn.GELU(approximate="tanh"))
Var exp(const Var& x);
Var log(const Var& x);
Var tanh(const Var& x);
Var sigmoid(const Var& x);
Var relu(const Var& x);  // gradient 0 at x = 0, as PyTorch
Var gelu(const Var& x, Gelu approximate = Gelu::exact);

// --- shape.cpp ------------------------------------------------------------------------------
// x [...] -> the same elements in another shape (one size may be -1).
Var reshape(const Var& x, const Shape& shape);
// x [...] -> x's dimensions in the order dims.
Var permute(const Var& x, const Shape& dims);
Var transpose(const Var& x, std::int64_t a, std::int64_t b);
// x [B, T, H * D] -> [B, T, H, D], and back.
Var split_heads(const Var& x, std::int64_t heads);
Var merge_heads(const Var& x);  // x [B, T, H, D] -> [B, T, H * D]
// xs [..., n_i, ...] (equal elsewhere) -> [..., sum n_i, ...] along dim.
Var concat(const std::vector<Var>& xs, std::int64_t dim);
// x [..., n, ...] -> the elements start, start + step, ... below end along dim (Python bounds).
Var slice(const Var& x, std::int64_t dim, std::int64_t start, std::int64_t end,
          std::int64_t step = 1);
// ops::pack_rows and ops::unpack_rows: x [B, T, ...] -> [sum(lengths), ...] and back, each
// the other's backward.
Var pack_rows(const Var& x, const std::vector<std::int64_t>& lengths);
Var unpack_rows(const Var& x, const std::vector<std::int64_t>& lengths, std::int64_t T);

// --- masked_fill.cpp ------------------------------------------------------------------------
// x [...], mask boolean broadcastable to x's shape -> x with value where mask is true (PyTorch's
// masked_fill); those entries get no gradient.
Var masked_fill(const Var& x, const Tensor& mask, double value);

// --- softmax.cpp ----------------------------------------------------------------------------
// x [...] -> [...], normalized along dim, computed stably (the row maximum subtracted). A row
// that is -inf everywhere (every entry masked) gives softmax 0 and log_softmax -inf, with zero
// gradient, never NaN.
Var softmax(const Var& x, std::int64_t dim);
Var log_softmax(const Var& x, std::int64_t dim);

// --- gru.cpp --------------------------------------------------------------------------------
// x [N, I], h [N, H], w_ih [3H, I], w_hh [3H, H], b_ih [3H], b_hh [3H] (either bias undefined:
// none) -> h' [N, H], one step of a GRU (Cho et al. 2014) as PyTorch's GRUCell computes it, the
// gates in the order r, z, n of w_ih's and w_hh's rows:
//   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z = sigmoid(W_iz x + b_iz + W_hz h + b_hz),
//   n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h.
// One node: the forward saves r, z, n and W_hn h + b_hn; the backward is written out in gru.cpp.
Var gru_cell(const Var& x, const Var& h, const Var& w_ih, const Var& w_hh, const Var& b_ih = {},
             const Var& b_hh = {});

// --- layer_norm.cpp -------------------------------------------------------------------------
// x [..., *normalized_shape], weight and bias [*normalized_shape] (either may be undefined) ->
// (x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape dimensions,
// with the biased variance (PyTorch's nn.LayerNorm).
Var layer_norm(const Var& x, const Shape& normalized_shape, const Var& weight = {},
               const Var& bias = {}, double eps = 1e-5);

// --- embedding.cpp --------------------------------------------------------------------------
// weight [V, E], indices (in [0, V)) laid out in row-major order of shape -> [*shape, E].
Var embedding(const Var& weight, const std::vector<std::int64_t>& indices, const Shape& shape);

// --- dropout.cpp ----------------------------------------------------------------------------
// x [..., R, C] -> [..., R, C]: entry (n, r, c), with n the row-major index over the leading
// dimensions, is kept when qkv::dropout_keep(seed, offset, n, r, c, p) and scaled by 1 / (1 - p),
// else zeroed. A 1-D x is [1, C]. The backward regenerates the mask from Philox. For attention
// probabilities [B, Hq, Tq, Tk] these are exactly the attention kernel's keep decisions.
Var dropout(const Var& x, double p, std::uint64_t seed, std::uint64_t offset = 0);

// --- cross_entropy.cpp ----------------------------------------------------------------------
struct CrossEntropyOptions {
  std::int64_t ignore_index = -100;  // targets equal to it add nothing and are not counted
  double label_smoothing = 0.0;      // in [0, 1]
};
// logits [N, C], targets [N] (class indices in [0, C), or ignore_index) -> [], PyTorch's
// F.cross_entropy with reduction "mean": with eps = label_smoothing,
//   loss_n = -(1 - eps) log p[n, t_n] - (eps / C) sum_c log p[n, c],  p = softmax(logits[n])
// averaged over the rows whose target is not ignore_index. With every row ignored the loss is
// NaN (0 / 0, as PyTorch) and the gradient zero.
Var cross_entropy(const Var& logits, const std::vector<std::int64_t>& targets,
                  const CrossEntropyOptions& options = {});

// --- attention.cpp --------------------------------------------------------------------------
// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv], with every option
// of qkv::AttentionOptions (see qkv/attention.hpp). A learned additive bias is passed as the Var
// `bias` (any shape broadcastable to [B, Hq, Tq, Tk]) and gets its gradient; a constant one may
// be given in options.bias instead (not both).
//
// The primitive: one node whose forward is qkv::attention_forward (it saves out and lse) and
// whose backward is qkv::attention_backward, on the backend options.backend picks. q, k, v may be
// bf16 or f16 (the kernel's half storage); under an Autocast, f32 q, k, v compute in its dtype.
Var attention(const Var& q, const Var& k, const Var& v, const AttentionOptions& options = {},
              const Var& bias = {});
// The same function composed from the ops above: matmul, scale, tanh for the soft-cap, add for
// the bias and ALiBi, masked_fill for every mask, softmax, dropout (the kernel's Philox keep
// decisions), matmul. Materializes the [B, Hq, Tq, Tk] scores; the engine derives its backward.
Var attention_decomposed(const Var& q, const Var& k, const Var& v,
                         const AttentionOptions& options = {}, const Var& bias = {});

// --- flex.cpp -------------------------------------------------------------------------------
// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv]: qkv::flex_attention
// with a score mod value and a block mask (qkv/mod_values.hpp), as one node whose backward is
// qkv::flex_attention_backward (P recomputed from the saved lse, ds'/ds on dual numbers).
// tables: one Var per tensor score_mod.captured() lists (a relative_bias table), holding that
// very tensor (same memory): they receive its gradient.
Var flex_attention(const Var& q, const Var& k, const Var& v, const ScoreMod& score_mod = {},
                   const BlockMask& block_mask = {}, const FlexOptions& options = {},
                   const std::vector<Var>& tables = {});

// --- linear.cpp -----------------------------------------------------------------------------
// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv]:
// qkv::linear_attention (qkv/linear_attention.hpp) as one node whose backward is
// qkv::linear_attention_backward, which recomputes the forward (the node saves only q, k and v).
// q, k, v may be bf16 or f16 (the kernel's half storage, computed in f32); under an Autocast, f32
// q, k, v are rounded to its dtype, and out comes back in f32.
Var linear_attention(const Var& q, const Var& k, const Var& v, const LinearOptions& options = {});

// --- scores.cpp -----------------------------------------------------------------------------
// Attention score functions, composed ops. q [..., Tq, Dq], k [..., Tk, Dk] -> [..., Tq, Tk].
Var dot_scores(const Var& q, const Var& k);  // q . k (Dq == Dk)
// scale * q . k, scale defaulting to 1 / sqrt(D).
Var scaled_dot_scores(const Var& q, const Var& k, std::optional<double> scale = std::nullopt);
// Bahdanau: v^T tanh(q W_q + k W_k), with w_q [Dq, A], w_k [Dk, A], v [A].
Var additive_scores(const Var& q, const Var& k, const Var& w_q, const Var& w_k, const Var& v);

}  // namespace qkv::autograd
