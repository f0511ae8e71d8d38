#pragma once

// One attention call drawn from a fuzz input (fuzz/attention_fuzz.cpp): shapes, the memory layout
// of every tensor, every option, the dtypes, the thread counts and the data, NaN, inf, huge and
// subnormal values included. Most inputs give a valid call; a few bytes turn one argument invalid
// so that validation is fuzzed too.

#include <cstdint>
#include <optional>
#include <string>

#include "byte_reader.hpp"
#include "kernels/cpu/bf16_gemm.hpp"
#include "mods_case.hpp"
#include "qkv/attention.hpp"
#include "qkv/tensor.hpp"

namespace qkv::fuzz {

// Where an output the caller allocates lies in memory (see make_output).
struct OutputLayouts {
  std::uint8_t out = 0, lse = 0, dq = 0, dk = 0, dv = 0, dbias = 0;
};

struct AttentionCase {
  DType dtype = DType::f32;  // of q (and of k and v unless the case makes them differ)
  // q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv], dout [B, Tq, Hq, Dv], views whose
  // memory gaps hold NaN (or true, for the mask).
  Tensor q, k, v, dout;
  AttentionOptions options;  // options.backend is left for the caller
  // With a value, the call is flex_attention with these mods, and of the options only scale
  // and dropout apply (FlexOptions).
  std::optional<ModsCase> mods;
  // With a value, the calls write into tensors the caller allocated in these layouts.
  std::optional<OutputLayouts> outputs;
  bool alias_output = false;  // an output that overlaps an input: validation must refuse it
  int threads[2] = {1, 1};    // OpenMP threads of the two runs of the fused kernel
  // A bf16 case's fused runs with the forward's bf16 products forced onto this matrix path
  // (kernels/cpu/bf16_gemm.hpp: the best the CPU runs, else the emulated AMX tiles), whatever the
  // number of keys; without a value, the library's own choice (f32 products at these sizes).
  std::optional<kernels::cpu::MatrixPath> matrix_path;
  std::string description;  // every decision, for the report of a finding
};

// Shapes are bounded by a work budget (kMaxPairs, kMaxWork) so that the three reference runs of a
// case stay fast; nullopt for an input whose shapes exceed it.
std::optional<AttentionCase> draw_case(ByteReader& in);

// A view with the shape of `logical` (any shape and dtype) holding its values converted to
// dtype, laid out in memory as `layout` says: layout % 24 orders the dimensions in memory (0 is
// row-major), layout / 24 % 4 adds gaps (1: padding around every dimension, 2: every other
// element of the innermost one, 3: both). The memory around the view is NaN (true for a boolean
// tensor), so that a read outside the view shows in the results.
Tensor make_view(const Tensor& logical, DType dtype, std::uint8_t layout);

// An output of `shape` and dtype in the same kinds of layout, its memory all NaN.
Tensor make_output(const Shape& shape, DType dtype, std::uint8_t layout);

}  // namespace qkv::fuzz
