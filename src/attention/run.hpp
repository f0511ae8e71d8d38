#pragma once

// What attention.cpp and flex.cpp do once a problem is set up, whatever its mods: the caller's
// tensors handed to the backend as they are (kernels/flash_params.hpp) where the kernels can read
// or write them in place, converted or staged otherwise; the backend run with this call's share
// of the threads.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "attention/common.hpp"
#include "core/thread_budget.hpp"
#include "kernels/cpu/entry.hpp"
#include "kernels/cpu/large_buffer.hpp"
#include "kernels/cpu/weights.hpp"
#include "kernels/reference/entry.hpp"
#include "qkv/system.hpp"

namespace qkv::attention {

// The memory of one call's converted inputs and staged outputs: a contiguous tensor of T over a
// buffer of the kernels' scratch pool (kernels/cpu/large_buffer.hpp), which the next call of the
// same shape takes again instead of faulting in and clearing fresh pages. A bf16 backward at T
// 4096, H 8, D 64 stages q, k, v, out, dout and three gradients in f32, 64 MiB: with
// Tensor::empty, every call faulted in 64 huge pages (/proc/vmstat thp_fault_alloc; an f32
// backward, 0). The tensors are views of the buffers: they live no longer than this object.
class Staging {
 public:
  template <class T>
  Tensor contiguous(const Shape& shape) {
    std::int64_t n = 1;
    for (const std::int64_t s : shape) n *= s;
    buffers_.push_back(kernels::cpu::allocate_large<std::byte>(
        static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * sizeof(T)));
    Shape strides(shape.size(), 1);
    for (std::size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
    return Tensor::from_blob(buffers_.back().get(), shape, strides, dtype_of<T>());
  }

 private:
  std::vector<kernels::cpu::LargeBuffer<std::byte>> buffers_;
};

// t (4 dimensions, [B, T, H, x]) as the kernels read it: t itself where its dtype is T and its
// last dimension is contiguous, whatever its other strides (a permuted [B, H, T, D] view); else a
// contiguous copy in T, in staging's memory.
template <class T>
Tensor readable(const Tensor& t, Staging& staging) {
  const bool as_is = t.dtype() == dtype_of<T>() && (t.size(-1) <= 1 || t.stride(-1) == 1);
  if (as_is) return t;
  Tensor copy = staging.contiguous<T>(t.shape());
  copy.copy_from(t);
  return copy;
}

template <class E>
kernels::Rows<E> rows_of(const Tensor& t) {  // t [B, T, H, x], last dimension contiguous
  return {static_cast<E*>(t.data()), t.stride(0), t.stride(1), t.stride(2)};
}

template <class E>
kernels::RowStats<E> stats_of(const Tensor& t) {  // t [B, H, T]
  return {static_cast<E*>(t.data()), t.stride(0), t.stride(1), t.stride(2)};
}

// One output of the kernels (validated: no two elements share memory, validate.hpp): the
// caller's tensor where they can write it as it stands (dtype T; with last_contiguous, the last
// dimension contiguous), else a contiguous tensor in T (in staging's memory) that finish() copies
// into the caller's.
template <class T>
class Writable {
 public:
  Writable(Tensor& dest, Staging& staging, bool last_contiguous = true)
      : dest_(dest),
        direct_(dest.dtype() == dtype_of<T>() &&
                (!last_contiguous || dest.size(-1) <= 1 || dest.stride(-1) == 1)),
        tensor_(direct_ ? dest : staging.contiguous<T>(dest.shape())) {}
  const Tensor& tensor() const { return tensor_; }
  void finish() {
    if (!direct_) dest_.copy_from(tensor_);
  }

 private:
  Tensor& dest_;
  bool direct_;
  Tensor tensor_;
};

// Who reads q, k and v: any backend (k and v readable in T), or the fused forward, which reads
// K and V in bf16 or f16 as they lie (computing in f32: the decode kernel as it streams them, the
// tiled one as it packs its tiles).
enum class Reader { any, fused_forward };

// Whether t's last dimension is contiguous (or has one element).
inline bool contiguous_last(const Tensor& t) { return t.size(-1) <= 1 || t.stride(-1) == 1; }

// Whether the fused forward reads k and v in their own 16-bit dtype: computing in f32, k and v
// both bf16 or both f16, their last dimension contiguous.
template <class T>
bool reads_half_kv(Reader reader, const Tensor& k, const Tensor& v) {
  return reader == Reader::fused_forward && std::is_same_v<T, float> &&
         (k.dtype() == DType::bf16 || k.dtype() == DType::f16) && v.dtype() == k.dtype() &&
         contiguous_last(k) && contiguous_last(v);
}

// q, k, v as the kernels read them (readable, or k and v as they are where reads_half_kv), alive
// for as long as params point into them.
// Where q is in that format too (last dimension contiguous), q_half keeps it as it lies beside
// its f32 copy: the tiled forward may then compute in bf16 products (kernels/half_kv.hpp).
// all_bf16: the caller's q, k and v were all bf16, each with its last dimension contiguous: as
// the fused forward reads them in place (reads_half_kv, q_half), so that it and the backward take
// bf16 products both or neither (a strided bf16 q once gave the backward bf16 dot products that
// the forward, reading its f32 copy, had not taken: other scores than the forward's lse came from).
template <class T>
struct ComputeInputs {
  Staging staging;  // first: the copies below live in it
  Tensor q, k, v, q_half;
  kernels::HalfKind half = kernels::HalfKind::none;
  bool all_bf16 = false;

  ComputeInputs(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                Reader reader = Reader::any)
      : q(readable<T>(q_in, staging)),
        all_bf16(q_in.dtype() == DType::bf16 && k_in.dtype() == DType::bf16 &&
                 v_in.dtype() == DType::bf16 && contiguous_last(q_in) && contiguous_last(k_in) &&
                 contiguous_last(v_in)) {
    if (reads_half_kv<T>(reader, k_in, v_in)) {
      k = k_in;
      v = v_in;
      half = k.dtype() == DType::bf16 ? kernels::HalfKind::bf16 : kernels::HalfKind::f16;
      if (q_in.dtype() == k.dtype() && contiguous_last(q_in)) {
        q_half = q_in;
      }
    } else {
      k = readable<T>(k_in, staging);
      v = readable<T>(v_in, staging);
    }
  }

  // Sizes, q, k, v, the resolved scale (default 1 / sqrt(D)) and dropout into params p.
  template <class Params>
  void into(Params& p, const kernels::Dims& dims, std::optional<double> scale,
            const kernels::DropoutParams& dropout) const {
    p.dims = dims;
    p.q = rows_of<const T>(q);
    if (half == kernels::HalfKind::none) {
      p.k = rows_of<const T>(k);
      p.v = rows_of<const T>(v);
    } else {
      p.half_kv = {half, rows_of<const std::uint16_t>(k), rows_of<const std::uint16_t>(v), {}};
      if (q_half.defined()) p.half_kv.q = rows_of<const std::uint16_t>(q_half);
    }
    p.scale = static_cast<T>(scale.value_or(1.0 / std::sqrt(static_cast<double>(dims.D))));
    p.dropout = dropout;
  }
};

// out [B, Tq, Hq, Dv], lse [B, Hq, Tq] (the caller's, any dtype and strides) <- the forward of
// params (q, k, v and mods set) on the reference or on the fused kernel, with this call's share of
// the threads.
template <class T, class S, class M>
void run_forward(const kernels::FwdParams<T, S, M>& params, bool reference, Tensor& out,
                 Tensor& lse) {
  Staging staging;
  Writable<T> out_w(out, staging);
  Writable<T> lse_w(lse, staging, false);
  kernels::FwdParams<T, S, M> p = params;
  p.out = rows_of<T>(out_w.tensor());
  p.lse = stats_of<T>(lse_w.tensor());
  if (reference) {
    kernels::reference::forward(p, static_cast<T*>(nullptr));
  } else {
    const detail::ThreadShare threads(num_threads());  // this call's share (qkv/system.hpp)
    kernels::cpu::forward(p);
  }
  out_w.finish();
  lse_w.finish();
}

// grads.dq, dk, dv (the caller's) <- the backward of params (q, k, v, mods, dbias and captured
// set) from dout, out and lse as the forward returned them. bf16_inputs: ComputeInputs' all_bf16
// (with a bf16 dout, as validation requires, the fused backward may compute in bf16 products).
template <class T, class S, class M>
void run_backward(const kernels::BwdParams<T, S, M>& params, bool reference, bool bf16_inputs,
                  const Tensor& dout, const Tensor& out, const Tensor& lse, AttentionGrads& grads) {
  Staging staging;
  const Tensor dout_r = readable<T>(dout, staging);
  const Tensor out_r = readable<T>(out, staging);
  const Tensor lse_r = lse.to(dtype_of<T>());
  Writable<T> dq(grads.dq, staging), dk(grads.dk, staging), dv(grads.dv, staging);
  kernels::BwdParams<T, S, M> p = params;
  // The backward only reads out and lse.
  p.out = rows_of<T>(out_r);
  p.lse = stats_of<T>(lse_r);
  p.dout = rows_of<const T>(dout_r);
  p.dq = rows_of<T>(dq.tensor());
  p.dk = rows_of<T>(dk.tensor());
  p.dv = rows_of<T>(dv.tensor());
  p.bf16_inputs = bf16_inputs && dout.dtype() == DType::bf16;
  if (reference) {
    kernels::reference::backward(p);
  } else {
    const detail::ThreadShare threads(num_threads());  // (qkv/system.hpp)
    kernels::cpu::backward(p);
  }
  dq.finish();
  dk.finish();
  dv.finish();
}

// weights [B, Hq, Tq, Tk] (the caller's, any strides) <- P of params (q, k and mods set; v a
// one-column stand-in, weights_stand_in_v): on the fused kernels tile by tile straight into it
// (staged only for another dtype), on the reference through its dense rows.
template <class T, class S, class M>
void run_weights(const kernels::FwdParams<T, S, M>& params, bool reference, Tensor& weights) {
  const kernels::Dims& d = params.dims;
  Staging staging;
  Writable<T> w(weights, staging, false);
  if (reference) {
    const Tensor out_t = Tensor::empty({d.B, d.Tq, d.Hq, 1}, dtype_of<T>());
    const Tensor lse_t = Tensor::empty({d.B, d.Hq, d.Tq}, dtype_of<T>());
    const Tensor dense = Tensor::empty({d.B, d.Hq, d.Tq, d.Tk}, dtype_of<T>());
    kernels::FwdParams<T, S, M> p = params;
    p.out = rows_of<T>(out_t);
    p.lse = stats_of<T>(lse_t);
    kernels::reference::forward(p, static_cast<T*>(dense.data()));
    Tensor target = w.tensor();  // a view: the same storage
    target.copy_from(dense);
  } else {
    kernels::WeightsOut<T> out{static_cast<T*>(w.tensor().data()), {}};
    for (int x = 0; x < 4; ++x) out.stride[x] = w.tensor().stride(x);
    const detail::ThreadShare threads(num_threads());  // (qkv/system.hpp)
    kernels::cpu::weights(params, out);
  }
  w.finish();
}

}  // namespace qkv::attention
