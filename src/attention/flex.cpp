// flex_attention's entry points: the same validation, backends and empty problems as
// attention_forward/backward, with the caller's mods (through their function pointers) and block
// mask in the problem.
#include "qkv/flex.hpp"

#include <limits>
#include <string>

#include "attention/common.hpp"
#include "attention/run.hpp"
#include "attention/validate.hpp"
#include "kernels/flex_mods.hpp"
#include "qkv/error.hpp"

namespace qkv::detail {
namespace {

AttentionOptions as_options(const FlexOptions& f) {
  AttentionOptions o;
  o.scale = f.scale;
  o.dropout_p = f.dropout_p;
  o.seed = f.seed;
  o.offset = f.offset;
  o.backend = f.backend;
  return o;
}

// The sizes of q, k, v, validated with options (the built-in checks, then dropout's starts).
kernels::Dims validate(const Tensor& q, const Tensor& k, const Tensor& v,
                       const FlexOptions& options) {
  const kernels::Dims dims = attention::validate_inputs(q, k, v, as_options(options));
  // Philox counters hold the drawn row and key positions in 32 bits each.
  constexpr std::int64_t kLimit = std::int64_t{1} << 32;
  const auto expect_start = [&](std::int64_t start, std::int64_t length, const char* name) {
    if (start < 0 || start > kLimit - length) {
      throw Error(
          std::string("options.") + name,
          "a position >= 0 with position + length (" + std::to_string(length) + ") at most 2^32",
          std::to_string(start));
    }
  };
  expect_start(options.dropout_q_start, dims.Tq, "dropout_q_start");
  expect_start(options.dropout_k_start, dims.Tk, "dropout_k_start");
  return dims;
}

// The dtype an output of the into forms must have: q's, or f32 where q is bf16 or f16 and the
// caller gave f32 (the kernels' f32 result, not rounded to 16 bits).
DType output_dtype(DType inputs, const Tensor& given) {
  const bool half = inputs == DType::bf16 || inputs == DType::f16;
  return half && given.defined() && given.dtype() == DType::f32 ? DType::f32 : inputs;
}

// The block mask for these shapes: the caller's, checked, or one that keeps every key.
BlockMask blocks_for(const BlockMask& given, const kernels::Dims& d) {
  if (!given.defined()) return create_block_mask(masks::Full{}, 1, 1, d.Tq, d.Tk);
  const auto expect = [](std::int64_t got, std::int64_t want, bool broadcast, const char* what) {
    if (got == want || (broadcast && got == 1)) return;
    throw Error(std::string("block_mask: ") + what,
                std::to_string(want) + (broadcast ? " or 1" : "") + " (from q, k)",
                std::to_string(got));
  };
  expect(given.batches(), d.B, true, "batches");
  expect(given.heads(), d.Hq, true, "heads");
  expect(given.q_len(), d.Tq, false, "Tq");
  expect(given.kv_len(), d.Tk, false, "Tk");
  return given;
}

template <class T>
struct FlexPrepared {
  attention::ComputeInputs<T> inputs;
  kernels::FlexFwdParams<T> params;

  FlexPrepared(const kernels::Dims& dims, const Tensor& q_in, const Tensor& k_in,
               const Tensor& v_in, const ErasedScore* score, const BlockMask& blocks,
               const FlexOptions& options, attention::Reader reader = attention::Reader::any)
      : inputs(q_in, k_in, v_in, reader) {
    inputs.into(params, dims, options.scale,
                {options.dropout_p, options.seed, options.offset, options.dropout_q_start,
                 options.dropout_k_start});
    params.score_mod.erased = score;
    params.mask_mod.erased = &blocks.data().mask;
    params.blocks = &blocks.data();
  }
};

template <class T>
void forward_as(const kernels::Dims& dims, const Tensor& q, const Tensor& k, const Tensor& v,
                const ErasedScore* score, const BlockMask& blocks, const FlexOptions& options,
                AttentionOutput& result) {
  const bool reference = attention::use_reference(options.backend);
  const FlexPrepared<T> prepared(
      dims, q, k, v, score, blocks, options,
      reference ? attention::Reader::any : attention::Reader::fused_forward);
  attention::run_forward(prepared.params, reference, result.out, result.lse);
}

// grads.captured <- the gradients of the captured tensors (zeros where the problem is empty).
template <class T>
void backward_as(const kernels::Dims& dims, const Tensor& dout, const Tensor& q, const Tensor& k,
                 const Tensor& v, const Tensor& out, const Tensor& lse, const ErasedScore* score,
                 const BlockMask& blocks, const FlexOptions& options,
                 const std::vector<Captured>& captured, AttentionGrads& grads) {
  const std::size_t n = captured.size();
  std::vector<Tensor> sums(n);  // in T, row-major in each captured tensor's shape
  std::vector<const void*> ids(n);
  std::vector<std::int64_t> sizes(n);
  std::vector<T*> buffers(n);
  for (std::size_t c = 0; c < n; ++c) {
    sums[c] = Tensor::zeros(captured[c].tensor().shape(), attention::dtype_of<T>());
    ids[c] = captured[c].id();
    sizes[c] = sums[c].numel();
    buffers[c] = static_cast<T*>(sums[c].data());
  }
  if (!attention::empty_problem(dims)) {
    const FlexPrepared<T> prepared(dims, q, k, v, score, blocks, options);
    kernels::FlexBwdParams<T> params;
    static_cast<kernels::FlexFwdParams<T>&>(params) = prepared.params;
    params.captured = score != nullptr ? static_cast<int>(n) : 0;
    params.captured_ids = ids.data();
    params.captured_sizes = sizes.data();
    params.captured_grads = buffers.data();
    attention::run_backward(params, attention::use_reference(options.backend),
                            prepared.inputs.all_bf16, dout, out, lse, grads);
  }
  for (std::size_t c = 0; c < n; ++c)
    grads.captured.push_back(sums[c].to(captured[c].tensor().dtype()));
}

// weights [B, Hq, Tq, Tk] <- P, as attention.cpp's weights_as for the built-in options.
template <class T>
void weights_as(const kernels::Dims& dims, const Tensor& q, const Tensor& k, const Tensor& v,
                const ErasedScore* score, const BlockMask& blocks, const FlexOptions& options,
                Tensor& weights) {
  const FlexPrepared<T> prepared(dims, q, k, v, score, blocks, options);
  attention::run_weights(prepared.params, attention::use_reference(options.backend), weights);
}

}  // namespace

Tensor flex_weights(const Tensor& q, const Tensor& k, const ErasedScore* score,
                    const BlockMask& block_mask, const FlexOptions& options) {
  const Tensor v = attention::weights_stand_in_v(q, k);
  const kernels::Dims dims = validate(q, k, v, options);
  const BlockMask blocks = blocks_for(block_mask, dims);
  Tensor weights = Tensor::zeros({dims.B, dims.Hq, dims.Tq, dims.Tk}, q.dtype());
  if (attention::empty_problem(dims)) return weights;
  if (q.dtype() == DType::f64) {
    weights_as<double>(dims, q, k, v, score, blocks, options, weights);
  } else {
    weights_as<float>(dims, q, k, v, score, blocks, options, weights);
  }
  return weights;
}

AttentionOutput flex_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                             const ErasedScore* score, const BlockMask& block_mask,
                             const FlexOptions& options) {
  // Validated before allocating by the shapes of q, k, v.
  const kernels::Dims dims = validate(q, k, v, options);
  AttentionOutput result{
      Tensor::empty(attention::out_shape(dims), q.dtype()),
      Tensor::empty(attention::lse_shape(dims), attention::lse_dtype(q.dtype()))};
  flex_forward_into(q, k, v, score, block_mask, options, result.out, result.lse);
  return result;
}

void flex_forward_into(const Tensor& q, const Tensor& k, const Tensor& v, const ErasedScore* score,
                       const BlockMask& block_mask, const FlexOptions& options, Tensor& out,
                       Tensor& lse) {
  const kernels::Dims dims = validate(q, k, v, options);
  const std::initializer_list<const Tensor*> inputs = {&q, &k, &v};
  attention::expect_output(out, "out", attention::out_shape(dims), output_dtype(q.dtype(), out),
                           inputs);
  attention::expect_output(lse, "lse", attention::lse_shape(dims), attention::lse_dtype(q.dtype()),
                           inputs);
  attention::expect_apart("lse", "memory of its own (not shared with out)", {&out, &lse});
  const BlockMask blocks = blocks_for(block_mask, dims);
  AttentionOutput result{out, lse};  // views of the caller's memory
  if (attention::empty_problem(dims)) {
    out.fill(0.0);
    lse.fill(-std::numeric_limits<double>::infinity());
  } else if (q.dtype() == DType::f64) {
    forward_as<double>(dims, q, k, v, score, blocks, options, result);
  } else {
    forward_as<float>(dims, q, k, v, score, blocks, options, result);
  }
}

AttentionGrads flex_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const ErasedScore* score,
                             const BlockMask& block_mask, const FlexOptions& options,
                             const std::vector<Captured>& captured) {
  validate(q, k, v, options);  // before allocating by their shapes
  AttentionGrads grads;
  grads.dq = Tensor::empty(q.shape(), q.dtype());
  grads.dk = Tensor::empty(k.shape(), k.dtype());
  grads.dv = Tensor::empty(v.shape(), v.dtype());
  flex_backward_into(dout, q, k, v, out, lse, score, block_mask, options, captured, grads);
  return grads;
}

void flex_backward_into(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const ErasedScore* score,
                        const BlockMask& block_mask, const FlexOptions& options,
                        const std::vector<Captured>& captured, AttentionGrads& grads) {
  const kernels::Dims dims = validate(q, k, v, options);
  attention::expect_tensor(dout, "dout", attention::out_shape(dims), q.dtype());
  attention::expect_tensor(out, "out", attention::out_shape(dims), q.dtype());
  attention::expect_tensor(lse, "lse", attention::lse_shape(dims), attention::lse_dtype(q.dtype()));
  const std::initializer_list<const Tensor*> inputs = {&dout, &q, &k, &v, &out, &lse};
  attention::expect_output(grads.dq, "grads.dq", q.shape(), output_dtype(q.dtype(), grads.dq),
                           inputs);
  attention::expect_output(grads.dk, "grads.dk", k.shape(), output_dtype(k.dtype(), grads.dk),
                           inputs);
  attention::expect_output(grads.dv, "grads.dv", v.shape(), output_dtype(v.dtype(), grads.dv),
                           inputs);
  attention::expect_apart("grads", "dq, dk and dv in separate memory",
                          {&grads.dq, &grads.dk, &grads.dv});
  const BlockMask blocks = blocks_for(block_mask, dims);
  if (attention::empty_problem(dims)) {  // no row reads any key: zero gradients
    for (Tensor* g : {&grads.dq, &grads.dk, &grads.dv}) g->fill(0.0);
  }
  grads.captured.clear();
  if (q.dtype() == DType::f64) {
    backward_as<double>(dims, dout, q, k, v, out, lse, score, blocks, options, captured, grads);
  } else {
    backward_as<float>(dims, dout, q, k, v, out, lse, score, blocks, options, captured, grads);
  }
}

}  // namespace qkv::detail
