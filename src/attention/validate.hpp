#pragma once

#include <string>

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

// Checks that no two of the defined tensors among `outputs` share memory; else throws
// Error(argument, expected, "overlapping tensors").
void expect_apart(const char* argument, const char* expected,
                  std::initializer_list<const Tensor*> outputs);

// x with 17 significant digits, as messages show option values.
std::string num(double x);

// Whether x is finite in the dtype the kernels compute in for inputs of this dtype: f64 for f64,
// f32 for f32, bf16 and f16. A finite double past f32's largest (1e39) would become inf there,
// and the backends, which apply it at different points, would disagree on what that makes.
bool finite_in_compute(double x, DType inputs);

// "a finite number" plus, for inputs computed in f32, the bound that implies.
std::string finite_for(DType inputs, const std::string& what);

}  // namespace qkv::attention
