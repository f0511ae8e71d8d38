#pragma once

#include "kernels/mods.hpp"
#include "kernels/params.hpp"

namespace qkv::detail {
struct BlockMaskData;
}

namespace qkv::kernels {

// One attention problem as every backend receives it: contiguous canonical-layout inputs in the
// compute type T, the resolved scale, the score mod and the mask mod (the built-in options by
// default; flex_attention's erased mods otherwise), the block mask the fused kernels walk, and
// dropout.
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
struct Problem {
  using Score = ScoreMod;
  using Mask = MaskMod;
  Dims dims;
  const T* q = nullptr;  // [B, Tq, Hq, D]
  const T* k = nullptr;  // [B, Tk, Hk, D]
  const T* v = nullptr;  // [B, Tk, Hk, Dv]
  T scale = 1;
  ScoreMod score_mod;
  MaskMod mask_mod;
  // The tiles of mask_mod (its batches and heads 1 or B and Hq); the reference does not read it.
  const detail::BlockMaskData* blocks = nullptr;
  DropoutParams dropout;
};

}  // namespace qkv::kernels
