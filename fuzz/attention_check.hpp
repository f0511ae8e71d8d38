#pragma once

// How the attention fuzz target judges one output tensor of the fused kernel (out, lse, dq, dk,
// dv or dbias) against the reference backend in the same dtype ("lo") and, where needed, the
// reference computed in f64 from the same input values ("exact"). The checks return an empty
// string when the tensor passes, else what is wrong.

#include <string>
#include <vector>

#include "qkv/tensor.hpp"

namespace qkv::fuzz {

// The versions of one output tensor, all of the same shape (exact undefined until it is
// computed), the slack of each entry (attention_slack.hpp: the rounding a correct computation
// may add, in row-major order) and where NaN and +-inf may trade places (Slack's *_edge).
struct Versions {
  const char* name;
  Tensor fused, lo, exact;
  const std::vector<double>* slack;
  const std::vector<char>* edge;
};

// NaN where the reference has NaN, non-finite where it is non-finite, entry by entry (the
// preamble's rule for non-finite inputs), except that where an infinity meets a probability at
// the edge of underflow (v.edge) NaN and +-inf may trade places. Entries where either holds a
// finite value past half the dtype's largest are left out: rounding decides whether such a value
// overflows.
std::string check_pattern(const Versions& v);

// Whether the fused result is within its slack of the reference's (slack_n as below, with lo_n
// for exact_n) at every entry finite in both. Then FlashAttention's rule holds without the
// exact result: |fused - exact| <= |fused - lo| + |lo - exact|.
bool within_slack(const Versions& v);

// FlashAttention's accuracy rule over the entries finite in all three versions:
//   max_n (|fused_n - exact_n| - slack_n) <= 3 max_n |lo_n - exact_n|,
// where slack_n adds to the computation's slack the rounding to the output's dtype,
// eps_dtype |exact_n|, and 16x the dtype's smallest normal (subnormal results lose digits). For
// f64 inputs lo is exact, so the fused results must be within the slack.
std::string check_accuracy(const Versions& v);

// The same bits (two runs of the fused kernel on different thread counts).
std::string check_bitwise(const char* name, const Tensor& a, const Tensor& b);

}  // namespace qkv::fuzz
