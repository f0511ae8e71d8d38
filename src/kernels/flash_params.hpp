#pragma once

// The kernel contract, in the style of FlashAttention's flash.h: what every backend receives for
// one attention problem. Pointers with their batch, row and head strides (the caller's tensors as
// they are: a permuted [B, H, T, D] view or a preallocated strided output costs no copy), the
// sizes, the resolved scale, the score mod and the mask mod (the built-in options by default,
// flex_attention's erased mods otherwise), the block mask the fused kernels walk, and dropout.

#include "kernels/half_kv.hpp"
#include "kernels/mods.hpp"
#include "kernels/params.hpp"

namespace qkv::detail {
struct BlockMaskData;
}

namespace qkv::kernels {

template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
struct FwdParams {
  using Score = ScoreMod;
  using Mask = MaskMod;
  Dims dims;
  Rows<const T> q;  // [B, Tq, Hq, D]
  Rows<const T> k;  // [B, Tk, Hk, D]
  Rows<const T> v;  // [B, Tk, Hk, Dv]
  // K and V in bf16 or f16 instead of k and v (kind none: not used): a KV cache the fused
  // forward (decode and tiled, T = float) reads in place; never handed to the other kernels.
  HalfKv half_kv;
  Rows<T> out;      // [B, Tq, Hq, Dv]: written by the forward, read by the backward
  RowStats<T> lse;  // [B, Hq, Tq]: written by the forward, read by the backward
  T scale = 1;
  ScoreMod score_mod;
  MaskMod mask_mod;
  // The tiles of mask_mod (its batches and heads 1 or B and Hq); the reference does not read it.
  const detail::BlockMaskData* blocks = nullptr;
  DropoutParams dropout;
};

// The attention weights P [B, Hq, Tq, Tk] as attention_weights writes them: element (b, h, i, j)
// at data[b * stride[0] + h * stride[1] + i * stride[2] + j * stride[3]].
template <class T>
struct WeightsOut {
  T* data = nullptr;
  std::int64_t stride[4] = {0, 0, 0, 0};

  T& operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const noexcept {
    return data[b * stride[0] + h * stride[1] + i * stride[2] + j * stride[3]];
  }
};

// The backward reads q, k, v, out and lse of the forward's params and dout; writes dq, dk, dv
// (every element), accumulates dS into dbias (zeroed by the caller; null without a bias) through
// dbias_index, whose zero strides sum the bias's broadcast dimensions, and into the captured
// tensors' gradients through the score mod.
template <class T, class ScoreMod = BuiltinScore<T>, class MaskMod = BuiltinMask>
struct BwdParams : FwdParams<T, ScoreMod, MaskMod> {
  Rows<const T> dout;  // [B, Tq, Hq, Dv]
  Rows<T> dq;          // [B, Tq, Hq, D]
  Rows<T> dk;          // [B, Tk, Hk, D]
  Rows<T> dv;          // [B, Tk, Hk, Dv]
  // q, k, v and dout were all bf16 (the caller's dtype; here their values converted exactly):
  // the fused backward may then compute its products in bf16 (kernels/cpu/bf16_grads-inl.h).
  bool bf16_inputs = false;
  T* dbias = nullptr;
  Broadcast4<T> dbias_index;
  // The tensors a score mod captured whose gradients are asked for (qkv/captured.hpp): their ids,
  // element counts and gradient buffers (row-major, zeroed by the caller), `captured` of each.
  int captured = 0;
  const void* const* captured_ids = nullptr;
  const std::int64_t* captured_sizes = nullptr;
  T* const* captured_grads = nullptr;
};

}  // namespace qkv::kernels
