#pragma once

#include "kernels/flash_params.hpp"
#include "kernels/flex_mods.hpp"

namespace qkv::kernels::reference {

// The reference backend's entry points (T = float or double), for the built-in options' mods and
// flex_attention's (FlexFwdParams, FlexBwdParams), on the same strided params as the fused
// kernels.

// q, k, v -> out, lse, and weights [B, Hq, Tq, Tk] (P, contiguous) when not null.
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
void forward(const FwdParams<T, ScoreMod, MaskMod>& params, T* weights);

// q, k, v, out, lse, dout -> dq, dk, dv, and dbias accumulated.
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
void backward(const BwdParams<T, ScoreMod, MaskMod>& params);

}  // namespace qkv::kernels::reference
