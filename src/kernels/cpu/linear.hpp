#pragma once

// The chunked linear attention kernel (qkv/linear_attention.hpp): per (batch, k/v head), a
// running state S = sum_j phi(k_j) v_j^T [D, Dv] and z = sum_j phi(k_j) [D] over the keys every
// row of a chunk of queries keeps (linear.cpp, kCausalChunk), and the chunk's own causal band of
// keys weighted one by one. O(T D Dv) time; the backward keeps the state at each chunk's start (O(T
// / chunk D Dv) memory per item under a causal mask, one state without).

#include "kernels/linear_params.hpp"

namespace qkv::kernels::cpu {

void linear_forward(const LinearParams<float>& p);
void linear_forward(const LinearParams<double>& p);
void linear_backward(const LinearParams<float>& p);
void linear_backward(const LinearParams<double>& p);

}  // namespace qkv::kernels::cpu
