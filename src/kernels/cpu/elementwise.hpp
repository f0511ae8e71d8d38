#pragma once

// Element-by-element math on the CPU's widest vectors (elementwise.cpp), for the autodiff
// engine's f32 activations.

#include <cstdint>

namespace qkv::kernels::cpu {

// y [n] <- tanh(x [n]), Highway's Tanh (at most 4 ulp; +-1 beyond |x| 18.7, NaN stays NaN). The
// scalar std::tanh it replaces was 29% of training the RNNsearch translator (its attention
// energies and deep output, 2 threads of an Intel Xeon with AMX, 2026-11-27, perf).
void tanh_values(const float* x, std::int64_t n, float* y);

}  // namespace qkv::kernels::cpu
