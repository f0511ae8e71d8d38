#pragma once

#include "kernels/flash_params.hpp"
#include "kernels/flex_mods.hpp"

namespace qkv::kernels::cpu {

// params (q, k and the built-in options' mods or flex's; block mask set) -> w: P [B, Hq, Tq, Tk]
// before dropout, rows that keep no key 0 (flash_weights.cpp).
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
void weights(const FwdParams<T, ScoreMod, MaskMod>& params, const WeightsOut<T>& w);

}  // namespace qkv::kernels::cpu
