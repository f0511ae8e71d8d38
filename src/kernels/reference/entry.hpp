#pragma once

#include "kernels/flex_mods.hpp"
#include "kernels/params.hpp"
#include "kernels/problem.hpp"

namespace qkv::kernels::reference {

// The reference backend's entry points (T = float or double), for the built-in options' mods and
// flex_attention's (FlexProblem).

// -> out [B, Tq, Hq, Dv], lse [B, Hq, Tq], and weights [B, Hq, Tq, Tk] (P) when not null.
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
void forward(const Problem<T, ScoreMod, MaskMod>& problem, T* out, T* lse, T* weights);

// out, dout [B, Tq, Hq, Dv], lse [B, Hq, Tq] -> dq [B, Tq, Hq, D], dk [B, Tk, Hk, D],
// dv [B, Tk, Hk, Dv]; dbias (zeroed by the caller, may be null) accumulates dS through
// dbias_index, whose zero strides sum the bias's broadcast dimensions.
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
void backward(const Problem<T, ScoreMod, MaskMod>& problem, const T* out, const T* lse,
              const T* dout, T* dq, T* dk, T* dv, T* dbias, const Broadcast4<T>& dbias_index);

}  // namespace qkv::kernels::reference
