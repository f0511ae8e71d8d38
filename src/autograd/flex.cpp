// flex_attention as one primitive: the fused forward saving out and lse, and the fused backward.
#include <string>
#include <utility>
#include <vector>

#include "autograd/node.hpp"
#include "qkv/autograd/ops.hpp"
#include "qkv/error.hpp"

namespace qkv::autograd {

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv]; tables: the
// Vars of score_mod's captured tensors, in order.
Var flex_attention(const Var& q, const Var& k, const Var& v, const ScoreMod& score_mod,
                   const BlockMask& block_mask, const FlexOptions& options,
                   const std::vector<Var>& tables) {
  const std::vector<Captured> captured = score_mod.captured();
  if (tables.size() != captured.size()) {
    throw Error("tables", std::to_string(captured.size()) + " (score_mod's captured tensors)",
                std::to_string(tables.size()));
  }
  for (std::size_t n = 0; n < tables.size(); ++n) {
    const Tensor& t = tables[n].value();
    const Tensor& c = captured[n].tensor();
    if (t.data() != c.data() || t.shape() != c.shape() || t.strides() != c.strides() ||
        t.dtype() != c.dtype()) {
      throw Error("tables[" + std::to_string(n) + "]",
                  "the tensor score_mod captured (" + c.describe() + ", the same memory)",
                  t.describe());
    }
  }
  const Tensor qv = q.value(), kv = k.value(), vv = v.value();
  // out, lse = flex_attention(q, k, v, score_mod, block_mask)
  AttentionOutput fwd = qkv::flex_attention(qv, kv, vv, score_mod, block_mask, options);
  const Tensor out = fwd.out, lse = fwd.lse;
  std::vector<Var> inputs = {q, k, v};
  inputs.insert(inputs.end(), tables.begin(), tables.end());
  return detail::record(std::move(fwd.out), inputs, [=](const Tensor& dout) {
    // dq, dk, dv = flex_attention_backward(dout, q, k, v, out, lse): P from lse, dS = P (dP - D)
    // ds'/ds; d table = sum of dS * ds'/d table over the pairs that read each element
    AttentionGrads g = qkv::flex_attention_backward(dout, qv, kv, vv, out, lse, score_mod,
                                                    block_mask, options, captured);
    std::vector<Tensor> grads = {g.dq, g.dk, g.dv};
    grads.insert(grads.end(), g.captured.begin(), g.captured.end());
    return grads;
  });
}

}  // namespace qkv::autograd
