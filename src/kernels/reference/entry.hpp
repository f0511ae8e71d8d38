#pragma once

#include "kernels/params.hpp"
#include "kernels/problem.hpp"

namespace qkv::kernels::reference {

// The reference backend's entry points for the built-in options (T = float or double).

// -> out [B, Tq, Hq, Dv], lse [B, Hq, Tq], and weights [B, Hq, Tq, Tk] (P) when not null.
template <class T>
void forward(const Problem<T>& problem, T* out, T* lse, T* weights);

// out, dout [B, Tq, Hq, Dv], lse [B, Hq, Tq] -> dq [B, Tq, Hq, D], dk [B, Tk, Hk, D],
// dv [B, Tk, Hk, Dv]; dbias (zeroed by the caller, may be null) accumulates dS through
// dbias_index, whose zero strides sum the bias's broadcast dimensions.
template <class T>
void backward(const Problem<T>& problem, const T* out, const T* lse, const T* dout, T* dq, T* dk,
              T* dv, T* dbias, const Broadcast4<T>& dbias_index);

}  // namespace qkv::kernels::reference
