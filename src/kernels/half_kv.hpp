#pragma once

// K and V in 16-bit storage (a KV cache in bf16 or f16) as the fused forward reads them in place:
// the kernels compute in f32, and every bf16 or f16 value converts to f32 exactly, so reading the
// cache as it lies gives the very bits of converting it first (and costs half the bytes).

#include <cstdint>

#include "kernels/params.hpp"

namespace qkv::kernels {

// Element tags of the two formats: the bits of one value (Rows<const Bf16> walks a bf16 tensor).
struct Bf16 {
  std::uint16_t bits;
};
struct F16 {
  std::uint16_t bits;
};
static_assert(sizeof(Bf16) == 2 && sizeof(F16) == 2, "tags are the bare bits");

enum class HalfKind : std::uint8_t { none, bf16, f16 };

// kind none: the kernels read k and v of the params; else K [B, Tk, Hk, D] and V [B, Tk, Hk, Dv]
// here, in that format (only the fused forward, computing in f32, is handed these: its decode
// loads and its tile packing read them).
// q: Q [B, Tq, Hq, D] in the same format where the caller's q is in it too (else null): then the
// tiled forward may compute S and P V with bf16 products on the machine's matrix units
// (bf16_gemm.hpp), P rounded to bf16, f32 accumulation.
struct HalfKv {
  HalfKind kind = HalfKind::none;
  Rows<const std::uint16_t> k;
  Rows<const std::uint16_t> v;
  Rows<const std::uint16_t> q;
};

}  // namespace qkv::kernels
