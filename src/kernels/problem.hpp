#pragma once

#include "kernels/mods.hpp"
#include "kernels/params.hpp"

namespace qkv::kernels {

// One attention problem with the built-in options, as every backend receives it: contiguous
// canonical-layout inputs in the compute type T, the resolved scale, the options as a score mod
// and a mask mod, and dropout.
template <class T>
struct Problem {
  Dims dims;
  const T* q = nullptr;  // [B, Tq, Hq, D]
  const T* k = nullptr;  // [B, Tk, Hk, D]
  const T* v = nullptr;  // [B, Tk, Hk, Dv]
  T scale = 1;
  BuiltinScore<T> score_mod;
  BuiltinMask mask_mod;
  DropoutParams dropout;
};

}  // namespace qkv::kernels
