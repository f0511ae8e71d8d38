#pragma once

#include <cstdint>

#include "kernels/flex_mods.hpp"
#include "kernels/params.hpp"
#include "kernels/problem.hpp"

namespace qkv::kernels::cpu {

// The fused CPU backend (T = float or double), for the built-in options' mods and for
// flex_attention's (FlexProblem). Same contract as the reference's entry points; Highway picks the
// best SIMD target of this CPU once, on the first call. problem.blocks must be set.

// -> out [B, Tq, Hq, Dv], lse [B, Hq, Tq].
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
void forward(const Problem<T, ScoreMod, MaskMod>& problem, T* out, T* lse);

// out, dout [B, Tq, Hq, Dv], lse [B, Hq, Tq] -> dq [B, Tq, Hq, D], dk [B, Tk, Hk, D],
// dv [B, Tk, Hk, Dv]; dbias (zeroed by the caller, may be null) accumulates dS through
// dbias_index. Bitwise the same for any thread count.
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
void backward(const Problem<T, ScoreMod, MaskMod>& problem, const T* out, const T* lse,
              const T* dout, T* dq, T* dk, T* dv, T* dbias, const Broadcast4<T>& dbias_index);

// y[i] = exp(x[i]) for x[i] <= 0, with the kernels' own vectorized f32 exp (for its tests).
void exp_softmax(const float* x, float* y, std::int64_t n);

}  // namespace qkv::kernels::cpu
