#pragma once

// What attention.cpp and flex.cpp do once a problem is set up, whatever its mods: q, k and v
// converted to the compute type, the backend run into compute-type outputs, the results copied
// into the caller's tensors.

#include <cmath>
#include <optional>

#include "attention/common.hpp"
#include "core/thread_budget.hpp"
#include "kernels/cpu/entry.hpp"
#include "kernels/reference/entry.hpp"
#include "qkv/system.hpp"

namespace qkv::attention {

// q, k, v in the compute type T, contiguous (views where they already are), alive for as long as
// a problem points into them.
template <class T>
struct ComputeInputs {
  Tensor q, k, v;

  ComputeInputs(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in)
      : q(q_in.to(dtype_of<T>()).contiguous()),
        k(k_in.to(dtype_of<T>()).contiguous()),
        v(v_in.to(dtype_of<T>()).contiguous()) {}

  // Sizes, pointers, the resolved scale (default 1 / sqrt(D)) and dropout into problem p.
  template <class Problem>
  void into(Problem& p, const kernels::Dims& dims, std::optional<double> scale,
            const kernels::DropoutParams& dropout) const {
    p.dims = dims;
    p.q = static_cast<const T*>(q.data());
    p.k = static_cast<const T*>(k.data());
    p.v = static_cast<const T*>(v.data());
    p.scale = static_cast<T>(scale.value_or(1.0 / std::sqrt(static_cast<double>(dims.D))));
    p.dropout = dropout;
  }
};

// out [B, Tq, Hq, Dv], lse [B, Hq, Tq] (the caller's, any dtype and strides) <- the forward of
// problem p on the reference or on the fused kernel, with this call's share of the threads.
template <class T, class Problem>
void run_forward(const Problem& p, bool reference, Tensor& out, Tensor& lse) {
  Tensor out_t = Tensor::empty(out_shape(p.dims), dtype_of<T>());
  Tensor lse_t = Tensor::empty(lse_shape(p.dims), dtype_of<T>());
  if (reference) {
    kernels::reference::forward(p, static_cast<T*>(out_t.data()), static_cast<T*>(lse_t.data()),
                                static_cast<T*>(nullptr));
  } else {
    const detail::ThreadShare threads(num_threads());  // this call's share (qkv/system.hpp)
    kernels::cpu::forward(p, static_cast<T*>(out_t.data()), static_cast<T*>(lse_t.data()));
  }
  out.copy_from(out_t);
  lse.copy_from(lse_t);
}

// grads.dq, dk, dv (the caller's) <- the backward of problem p from dout, out and lse as the
// forward returned them; dbias (compute type, zeroed, may be null) accumulates through
// dbias_index.
template <class T, class Problem>
void run_backward(const Problem& p, bool reference, const Tensor& dout, const Tensor& out,
                  const Tensor& lse, T* dbias, const kernels::Broadcast4<T>& dbias_index,
                  AttentionGrads& grads) {
  const kernels::Dims& d = p.dims;
  const Tensor dout_t = dout.to(dtype_of<T>()).contiguous();
  const Tensor out_t = out.to(dtype_of<T>()).contiguous();
  const Tensor lse_t = lse.to(dtype_of<T>()).contiguous();
  Tensor dq = Tensor::empty({d.B, d.Tq, d.Hq, d.D}, dtype_of<T>());
  Tensor dk = Tensor::empty({d.B, d.Tk, d.Hk, d.D}, dtype_of<T>());
  Tensor dv = Tensor::empty({d.B, d.Tk, d.Hk, d.Dv}, dtype_of<T>());
  const auto backward =
      reference ? &kernels::reference::backward<T, typename Problem::Score, typename Problem::Mask>
                : &kernels::cpu::backward<T, typename Problem::Score, typename Problem::Mask>;
  const detail::ThreadShare threads(reference ? 1 : num_threads());  // (qkv/system.hpp)
  backward(p, static_cast<const T*>(out_t.data()), static_cast<const T*>(lse_t.data()),
           static_cast<const T*>(dout_t.data()), static_cast<T*>(dq.data()),
           static_cast<T*>(dk.data()), static_cast<T*>(dv.data()), dbias, dbias_index);
  grads.dq.copy_from(dq);
  grads.dk.copy_from(dk);
  grads.dv.copy_from(dv);
}

}  // namespace qkv::attention
