#pragma once

#include "kernels/params.hpp"
#include "qkv/attention.hpp"

namespace qkv::attention {

// Checks q [B,Tq,Hq,D], k [B,Tk,Hk,D], v [B,Tk,Hk,Dv] and every option; returns the sizes.
// Throws qkv::Error naming the argument, the expected and the actual value.
kernels::Dims validate_inputs(const Tensor& q, const Tensor& k, const Tensor& v,
                              const AttentionOptions& options);

// The dtype lse has for inputs of dtype `input`: f64 for f64, else f32.
DType lse_dtype(DType input) noexcept;

// Checks that `tensor` (named `argument`) is defined with the given shape and dtype.
void expect_tensor(const Tensor& tensor, const char* argument, const Shape& shape, DType dtype);

// Checks that an output tensor can be written: the expected shape and dtype, no two elements in
// the same memory, and no memory shared with any of the inputs (so that writing it cannot change
// what is being read).
void expect_output(const Tensor& tensor, const char* argument, const Shape& shape, DType dtype,
                   std::initializer_list<const Tensor*> inputs);

}  // namespace qkv::attention
