#pragma once

#include <cstdint>

#include "kernels/flash_params.hpp"
#include "kernels/flex_mods.hpp"

namespace qkv::kernels::cpu {

// The fused CPU backend (T = float or double), for the built-in options' mods and for
// flex_attention's (FlexFwdParams, FlexBwdParams). Same contract as the reference's entry points;
// Highway picks the best SIMD target of this CPU once, on the first call. params.blocks must be
// set.

// q, k, v -> out, lse.
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
void forward(const FwdParams<T, ScoreMod, MaskMod>& params);

// q, k, v, out, lse, dout -> dq, dk, dv, and dbias accumulated. Bitwise the same for any thread
// count.
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
void backward(const BwdParams<T, ScoreMod, MaskMod>& params);

// s [n] <- cap tanh(s / cap) and, with grad (else null), grad [n] <- its derivative, as the fused
// kernels soft-cap the built-in option (f64 lanes, each result rounded once): flex_attention's
// scores::softcap, on rows of any length.
void soft_cap(float cap, float* s, float* grad, std::int64_t n);
void soft_cap(double cap, double* s, double* grad, std::int64_t n);

// y[i] = exp(x[i]) for x[i] <= 0, with the kernels' own vectorized f32 exp (for its tests).
void exp_softmax(const float* x, float* y, std::int64_t n);
// y[i] = exp(x[i]) for x[i] <= 0 as the bf16 forward's softmax takes it (tile-inl.h's
// exp_for_bf16; for its tests).
void exp_for_bf16(const float* x, float* y, std::int64_t n);

}  // namespace qkv::kernels::cpu
