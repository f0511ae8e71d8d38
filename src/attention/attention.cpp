#include "qkv/attention.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "attention/common.hpp"
#include "attention/run.hpp"
#include "attention/validate.hpp"
#include "kernels/flash_params.hpp"
#include "kernels/reference/entry.hpp"
#include "qkv/block_mask.hpp"
#include "qkv/error.hpp"

namespace qkv {
namespace {

using attention::dtype_of;
using attention::empty_problem;
using attention::lse_shape;
using attention::out_shape;
using attention::use_reference;

// The inputs and options of one call, for a backend that computes in T: the caller's tensors
// where the kernels can read them as they are, copies otherwise, kept alive for the params'
// pointers.
template <class T>
struct Prepared {
  attention::ComputeInputs<T> inputs;
  Tensor mask, bias;
  std::shared_ptr<const detail::BlockMaskData> blocks;
  kernels::FwdParams<T> params;

  // with_blocks: for the fused kernels, which walk the block mask; reader: who reads q, k, v.
  Prepared(const kernels::Dims& dims, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
           const AttentionOptions& options, bool with_blocks,
           attention::Reader reader = attention::Reader::any)
      : inputs(q_in, k_in, v_in, reader) {
    kernels::FwdParams<T>& p = params;
    inputs.into(p, dims, options.scale, {options.dropout_p, options.seed, options.offset});
    if (options.mask.defined()) mask = options.mask.contiguous();
    p.mask_mod = attention::builtin_mask(dims, options, mask);
    const kernels::Lengths& lengths = p.mask_mod.lengths;
    p.score_mod.lengths = lengths;
    p.score_mod.softcap = static_cast<T>(options.softcap);
    if (options.bias.defined()) {
      bias = options.bias.to(dtype_of<T>()).contiguous();
      p.score_mod.bias = attention::broadcast4<T>(bias);
    }
    p.score_mod.alibi_slopes = options.alibi_slopes.empty() ? nullptr : options.alibi_slopes.data();
    if (with_blocks) {
      // The block mask of the built-in options: per batch with lengths or a per-batch keep-mask,
      // per head with a per-head keep-mask; classified from the intervals (and the tensor's tiles).
      const bool per_batch = lengths.query != nullptr || lengths.key != nullptr ||
                             (p.mask_mod.keep && p.mask_mod.keep.stride[0] != 0);
      const bool per_head = p.mask_mod.keep && p.mask_mod.keep.stride[1] != 0;
      blocks = detail::build_block_mask(detail::erase_mask(p.mask_mod), per_batch ? dims.B : 1,
                                        per_head ? dims.Hq : 1, dims.Tq, dims.Tk);
      p.blocks = blocks.get();
    }
  }
};

template <class T>
void forward_as(const kernels::Dims& dims, const Tensor& q, const Tensor& k, const Tensor& v,
                const AttentionOptions& options, Tensor& out, Tensor& lse) {
  if (empty_problem(dims)) {
    out.fill(0.0);
    lse.fill(-std::numeric_limits<double>::infinity());
    return;
  }
  const bool reference = use_reference(options.backend);
  const Prepared<T> prepared(dims, q, k, v, options, !reference,
                             reference ? attention::Reader::any : attention::Reader::fused_forward);
  attention::run_forward(prepared.params, reference, out, lse);
}

template <class T>
void backward_as(const kernels::Dims& dims, const Tensor& dout, const Tensor& q, const Tensor& k,
                 const Tensor& v, const Tensor& out, const Tensor& lse,
                 const AttentionOptions& options, AttentionGrads& grads) {
  if (empty_problem(dims)) {  // no row reads any key: zero gradients
    for (Tensor* g : {&grads.dq, &grads.dk, &grads.dv, &grads.dbias}) {
      if (g->defined()) g->fill(0.0);
    }
    return;
  }
  const bool reference = use_reference(options.backend);
  const Prepared<T> prepared(dims, q, k, v, options, !reference);
  kernels::BwdParams<T> params;
  static_cast<kernels::FwdParams<T>&>(params) = prepared.params;
  Tensor dbias;
  if (options.bias.defined()) {
    dbias = Tensor::zeros(options.bias.shape(), dtype_of<T>());
    params.dbias = static_cast<T*>(dbias.data());
    params.dbias_index = attention::broadcast4<T>(dbias);
  }
  attention::run_backward(params, reference, prepared.inputs.all_bf16, dout, out, lse, grads);
  if (dbias.defined()) grads.dbias.copy_from(dbias);
}

// weights [B, Hq, Tq, Tk] (the caller's, any strides) <- P (attention::run_weights); v is a
// one-column stand-in: P does not depend on v.
template <class T>
void weights_as(const kernels::Dims& dims, const Tensor& q, const Tensor& k, const Tensor& v,
                const AttentionOptions& options, Tensor& weights) {
  if (empty_problem(dims)) {
    weights.fill(0.0);
    return;
  }
  const bool reference = use_reference(options.backend);
  const Prepared<T> prepared(dims, q, k, v, options, !reference);
  attention::run_weights(prepared.params, reference, weights);
}

}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionOptions& options) {
  const kernels::Dims dims = attention::validate_inputs(q, k, v, options);
  AttentionOutput result{Tensor::empty(out_shape(dims), q.dtype()),
                         Tensor::empty(lse_shape(dims), attention::lse_dtype(q.dtype()))};
  attention_forward(q, k, v, options, result.out, result.lse);
  return result;
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionOptions& options, Tensor& out, Tensor& lse) {
  const kernels::Dims dims = attention::validate_inputs(q, k, v, options);
  const std::initializer_list<const Tensor*> inputs = {&q, &k, &v, &options.mask, &options.bias};
  attention::expect_output(out, "out", out_shape(dims), q.dtype(), inputs);
  attention::expect_output(lse, "lse", lse_shape(dims), attention::lse_dtype(q.dtype()), inputs);
  if (out.overlaps(lse)) {
    throw Error("lse", "memory of its own (not shared with out)", "a tensor that overlaps out");
  }
  if (q.dtype() == DType::f64) {
    forward_as<double>(dims, q, k, v, options, out, lse);
  } else {
    forward_as<float>(dims, q, k, v, options, out, lse);
  }
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const AttentionOptions& options) {
  attention::validate_inputs(q, k, v, options);  // before allocating by the shapes of q, k, v
  AttentionGrads grads;
  grads.dq = Tensor::empty(q.shape(), q.dtype());
  grads.dk = Tensor::empty(k.shape(), k.dtype());
  grads.dv = Tensor::empty(v.shape(), v.dtype());
  if (options.bias.defined()) {
    grads.dbias = Tensor::empty(options.bias.shape(), options.bias.dtype());
  }
  attention_backward(dout, q, k, v, out, lse, options, grads);
  return grads;
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const AttentionOptions& options,
                        AttentionGrads& grads) {
  const kernels::Dims dims = attention::validate_inputs(q, k, v, options);
  attention::expect_tensor(dout, "dout", out_shape(dims), q.dtype());
  attention::expect_tensor(out, "out", out_shape(dims), q.dtype());
  attention::expect_tensor(lse, "lse", lse_shape(dims), attention::lse_dtype(q.dtype()));
  const std::initializer_list<const Tensor*> inputs = {
      &dout, &q, &k, &v, &out, &lse, &options.mask, &options.bias};
  attention::expect_output(grads.dq, "grads.dq", q.shape(), q.dtype(), inputs);
  attention::expect_output(grads.dk, "grads.dk", k.shape(), k.dtype(), inputs);
  attention::expect_output(grads.dv, "grads.dv", v.shape(), v.dtype(), inputs);
  if (options.bias.defined()) {
    attention::expect_output(grads.dbias, "grads.dbias", options.bias.shape(), options.bias.dtype(),
                             inputs);
  }
  attention::expect_apart("grads", "dq, dk, dv and dbias in separate memory",
                          {&grads.dq, &grads.dk, &grads.dv, &grads.dbias});
  if (q.dtype() == DType::f64) {
    backward_as<double>(dims, dout, q, k, v, out, lse, options, grads);
  } else {
    backward_as<float>(dims, dout, q, k, v, out, lse, options, grads);
  }
}

Tensor attention_weights(const Tensor& q, const Tensor& k, const AttentionOptions& options) {
  const kernels::Dims dims =
      attention::validate_inputs(q, k, attention::weights_stand_in_v(q, k), options);
  Tensor weights = Tensor::empty({dims.B, dims.Hq, dims.Tq, dims.Tk}, q.dtype());
  attention_weights(q, k, options, weights);
  return weights;
}

void attention_weights(const Tensor& q, const Tensor& k, const AttentionOptions& options,
                       Tensor& weights) {
  const Tensor v = attention::weights_stand_in_v(q, k);
  const kernels::Dims dims = attention::validate_inputs(q, k, v, options);
  attention::expect_output(weights, "weights", {dims.B, dims.Hq, dims.Tq, dims.Tk}, q.dtype(),
                           {&q, &k, &options.mask, &options.bias});
  if (q.dtype() == DType::f64) {
    weights_as<double>(dims, q, k, v, options, weights);
  } else {
    weights_as<float>(dims, q, k, v, options, weights);
  }
}

}  // namespace qkv
