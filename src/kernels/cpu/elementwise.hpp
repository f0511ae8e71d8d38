#pragma once

// Element-by-element math on the CPU's widest vectors (elementwise.cpp), for the autodiff
// engine's f32 activations.

#include <cstdint>

namespace qkv::kernels::cpu {

// y [n] <- tanh(x [n]), Highway's Tanh (at most 4 ulp; +-1 beyond |x| 18.7, NaN stays NaN). The
// scalar std::tanh it replaces was 29% of training the RNNsearch translator (its attention
// energies and deep output, 2 threads of an Intel Xeon with AMX, 2026-11-27, perf).
void tanh_values(const float* x, std::int64_t n, float* y);

// y [n] <- x [n] where x > 0, else +0 (NaN and -0 included). The scalar loops of the
// autodiff engine's relu, forward and backward, were 4.4% of a training step of qkv demo's
// translator (2 threads of an Intel Xeon with AMX, 2026-11-27, perf).
void relu_values(const float* x, std::int64_t n, float* y);
void relu_values(const double* x, std::int64_t n, double* y);
// dx [n] <- g [n] where y [n] (relu's output) > 0, else 0: relu's backward from its output.
void relu_grad(const float* g, const float* y, std::int64_t n, float* dx);
void relu_grad(const double* g, const double* y, std::int64_t n, double* dx);

}  // namespace qkv::kernels::cpu
