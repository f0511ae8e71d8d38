#pragma once

// The oracle of linear attention: the formula of qkv/linear_attention.hpp evaluated directly,
// one (b, h, i) at a time, with the weights w_ij and the features of every kept key
// materialized: O(Tq Tk F D).
// The chunked kernel (kernels/cpu/linear.cpp) is checked against it.

#include "kernels/linear_params.hpp"

namespace qkv::kernels::reference {

// q, k, v -> out.
void linear_forward(const LinearParams<double>& p);
// q, k, v, dout -> dq, dk, dv.
void linear_backward(const LinearParams<double>& p);

}  // namespace qkv::kernels::reference
