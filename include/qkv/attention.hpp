#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "qkv/tensor.hpp"

namespace qkv {

// Which diagonal a causal mask follows when Tq != Tk (FlashAttention's conventions):
// top_left keeps j <= i; bottom_right keeps j <= i + tk - tq, so the last query sees every key.
enum class Causal : std::uint8_t { none, top_left, bottom_right };

// Which implementation computes attention. automatic is the fused CPU kernel; reference is the
// dense oracle (slow, materializes S and P). The environment variable QKV_BACKEND=reference (or
// =cpu) overrides the option everywhere, for debugging.
enum class Backend : std::uint8_t { automatic, reference, cpu };

// A local attention band around the (bottom-right aligned) diagonal: key j is kept for query i
// when i + tk - tq - left <= j <= i + tk - tq + right. -1 leaves that side unbounded.
struct Window {
  std::int64_t left = -1;
  std::int64_t right = -1;
};

// Every option is a score modification or a mask, and all of them compose. For query i and key
// j of batch b and head h, with tq and tk the lengths of batch b:
//   1. s = scale * q_i . k_j; with softcap c > 0, s = c * tanh(s / c)
//   2. s += bias[b, h, i, j]; with ALiBi, s -= slope_h * |i + tk - tq - j|
//   3. key j is dropped when j >= tk, i >= tq, mask[b, h, i, j] is false, or causal or the
//      window excludes it
//   4. P = softmax over the kept keys; lse = log of the row's sum of exp(s)
//   5. with dropout, each P entry is kept with probability 1 - p and scaled by 1 / (1 - p)
//   6. out_i = sum_j P_ij v_j, with the k/v head of query head h being h / (Hq / Hk)
// A row with every key dropped gives out 0, lse -inf and zero gradients.
struct AttentionOptions {
  std::optional<double> scale;  // default 1 / sqrt(D)
  Causal causal = Causal::none;
  Window window;
  std::vector<std::int64_t> key_lengths;    // [B] valid keys per batch; empty = Tk for all
  std::vector<std::int64_t> query_lengths;  // [B] valid queries per batch; empty = Tq for all
  Tensor mask;  // boolean keep-mask broadcastable to [B, Hq, Tq, Tk]; undefined = none
  Tensor bias;  // additive bias (floating) broadcastable to [B, Hq, Tq, Tk]; undefined = none
  std::vector<double> alibi_slopes;  // [Hq]; empty = no ALiBi
  double softcap = 0.0;              // c > 0 turns soft-capping on
  double dropout_p = 0.0;            // in [0, 1)
  std::uint64_t seed = 0;            // dropout: Philox key
  std::uint64_t offset = 0;          // dropout: Philox counter offset
  Backend backend = Backend::automatic;
};

struct AttentionOutput {
  Tensor out;  // [B, Tq, Hq, Dv], dtype of q
  Tensor lse;  // [B, Hq, Tq], f64 for f64 inputs, else f32
};

struct AttentionGrads {
  Tensor dq;     // [B, Tq, Hq, D], dtype of q
  Tensor dk;     // [B, Tk, Hk, D], dtype of k
  Tensor dv;     // [B, Tk, Hk, Dv], dtype of v
  Tensor dbias;  // the shape and dtype the bias was given in; undefined without a bias
  // flex_attention_backward: the gradients of the captured tensors asked for, in their order.
  std::vector<Tensor> captured;
};

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv]; any strides; q, k and v share one
// floating dtype. Returns out [B, Tq, Hq, Dv] and lse [B, Hq, Tq].
AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionOptions& options = {});

// The same, writing into tensors the caller allocated (any strides, the shapes and dtypes
// above). On any error nothing is written.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionOptions& options, Tensor& out, Tensor& lse);

// dout [B, Tq, Hq, Dv]; q, k, v as in the forward; out [B, Tq, Hq, Dv] and lse [B, Hq, Tq] as
// the forward returned them, with the same options (dropout's seed and offset included).
AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const AttentionOptions& options = {});

// The same, writing into grads.dq, grads.dk, grads.dv (and grads.dbias when a bias is given),
// which the caller allocated. On any error nothing is written.
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const AttentionOptions& options,
                        AttentionGrads& grads);

// q [B, Tq, Hq, D], k [B, Tk, Hk, D] -> P [B, Hq, Tq, Tk], the attention probabilities for
// inspection (before dropout; rows with every key dropped are 0). Dtype of q. The fused backend
// computes P tile by tile from each row's running max and sum with every option, writing straight
// into the result: it costs the output and nothing beside it (no score matrix; V is not read).
Tensor attention_weights(const Tensor& q, const Tensor& k, const AttentionOptions& options = {});

// The same, writing into a tensor the caller allocated (any strides, e.g. a slice of a larger
// buffer; dtype of q). On any error nothing is written.
void attention_weights(const Tensor& q, const Tensor& k, const AttentionOptions& options,
                       Tensor& weights);

}  // namespace qkv
