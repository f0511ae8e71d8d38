#pragma once

#include "kernels/flash_params.hpp"
#include "kernels/flex_mods.hpp"

namespace qkv::kernels::cpu {

// The fused forward of decode shapes (TileTraits::decode_shape: few queries, as in decoding
// against a KV cache): the same contract as forward (entry.hpp), which calls it for them.
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
void decode(const FwdParams<T, ScoreMod, MaskMod>& params);

}  // namespace qkv::kernels::cpu
