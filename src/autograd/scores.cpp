// Attention score functions, composed from the ops: no backward of their own.
#include <cmath>

#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

// q [..., Tq, D], k [..., Tk, D] -> [..., Tq, Tk]
Var dot_scores(const Var& q, const Var& k) {
  if (q.dim() < 2 || k.dim() < 2) {
    throw Error(q.dim() < 2 ? "q" : "k", "at least 2 dimensions [..., T, D]",
                (q.dim() < 2 ? q : k).value().describe());
  }
  if (q.size(-1) != k.size(-1)) {
    throw Error("k", "last size " + std::to_string(q.size(-1)) + " (q's)", shape_string(k.shape()));
  }
  return matmul(q, transpose(k, -2, -1));
}

// q [..., Tq, D], k [..., Tk, D] -> [..., Tq, Tk]
Var scaled_dot_scores(const Var& q, const Var& k, std::optional<double> scale) {
  const Var s = dot_scores(q, k);
  return s * scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

// q [..., Tq, Dq], k [..., Tk, Dk], w_q [Dq, A], w_k [Dk, A], v [A] -> [..., Tq, Tk]
Var additive_scores(const Var& q, const Var& k, const Var& w_q, const Var& w_k, const Var& v) {
  if (v.dim() != 1) throw Error("v", "1 dimension [A]", v.value().describe());
  if (w_q.dim() != 2 || w_q.size(1) != v.size(0)) {
    throw Error("w_q", "shape [Dq, " + std::to_string(v.size(0)) + "]", shape_string(w_q.shape()));
  }
  if (w_k.dim() != 2 || w_k.size(1) != v.size(0)) {
    throw Error("w_k", "shape [Dk, " + std::to_string(v.size(0)) + "]", shape_string(w_k.shape()));
  }
  if (q.dim() < 2 || k.dim() < 2) {
    throw Error(q.dim() < 2 ? "q" : "k", "at least 2 dimensions [..., T, D]",
                (q.dim() < 2 ? q : k).value().describe());
  }
  const std::int64_t A = v.size(0);
  Shape q_shape = q.shape(), k_shape = k.shape();
  q_shape.back() = A;
  k_shape.back() = A;
  q_shape.insert(q_shape.end() - 1, 1);  // [..., Tq, 1, A]
  k_shape.insert(k_shape.end() - 2, 1);  // [..., 1, Tk, A]
  // e = tanh(q W_q + k W_k)  [..., Tq, Tk, A]
  const Var e = tanh(reshape(matmul(q, w_q), q_shape) + reshape(matmul(k, w_k), k_shape));
  // scores = e v  [..., Tq, Tk]
  const Var scores = matmul(e, reshape(v, {A, 1}));
  Shape out = scores.shape();
  out.pop_back();
  return reshape(scores, out);
}

}  // namespace qkv::autograd
