#pragma once

// How far from the f64 reference a correct implementation may land through rounding in its
// computation, entry by entry, for every output of a case: the part of the accuracy rule's
// absolute term that depends on the case (attention_check.hpp adds the rounding to the output's
// dtype). A sum of n terms computed in precision eps is off by up to about sqrt(n) eps times the
// sum of the terms' magnitudes, whatever order it adds them in (n counts the terms along the
// whole chain of sums that leads to the result: Tk + G Tq + D + Dv), and P_ij = exp(s_ij - lse_i)
// computed from rounded scores moves by up to eps (2 |s| + |lse_i|) P_ij; so the slack of an
// entry is
//   4 sqrt(n) eps_compute (the sum of the magnitudes of its terms, P's rounding included),
// the magnitudes computed here in f64 from the reference's probabilities P, e.g.
// sum_j ((2 + 2 A_i + |lse_i|) P_ij + lost) z_ij |v_jc| for out_ic, with A_i the largest |s_ij|
// row i can have, z the dropout factor, and lost the part of a P_ij that may flush to 0 below the
// smallest normal (2^-125 over the factor in front). An entry that cancels large terms gets their
// size, not its own, and an entry whose terms are small gets a small slack, so a bug in the masks,
// the indexing or the mods shows as an error many times the slack.

#include <vector>

#include "attention_case.hpp"
#include "qkv/attention.hpp"

namespace qkv::fuzz {

// Each in the row-major order of its tensor: out [B, Tq, Hq, Dv], lse [B, Hq, Tq],
// dq [B, Tq, Hq, D], dk [B, Tk, Hk, D], dv [B, Tk, Hk, Dv], dbias [the bias's shape].
struct Slack {
  // captured: a mods case's table [Hq, n] (empty without one).
  std::vector<double> out, lse, dq, dk, dv, dbias, captured;
  // Where NaN and +-inf may trade places (1), in the same order: the entries that multiply an
  // infinity by a kept P_ij below the compute dtype's smallest normal, or that read such an
  // entry. Whether P_ij came out 0 (0 x inf = NaN) or tiny (inf) depends on how it was rounded:
  // the fused kernel's exp returns 0 below e^-87.7 where libm's returns subnormals, and its online
  // softmax multiplies v_j by exp(s_ij - m) with a running max m that may still be low, then the
  // sum by exp(m - m_new), so the underflow lands on another factor (docs/numerics.md).
  std::vector<char> out_edge, dq_edge, dk_edge, dv_edge, dbias_edge, captured_edge;
};

// A case with a forced matrix path (c.matrix_path), or with bf16 inputs where the library picks
// bf16 products itself (an AMX CPU), also gets the rounding of P to bf16 before P V
// in out and, through D_i, in the backward's dS, and the backward's own rounding of P Z before
// dO^T (P Z) in dv and of dS before dS K and dS^T Q in dq and dk. For a mods case, P comes from
// flex_attention_weights, |s_ij| is bounded through the score
// mod's steps (ModsCase::steps: scaled, capped, offset) and ds'/ds by the product of its factors.
// c: a valid case; forward: the reference's forward of it (its out and lse give the backward's
// D_i and the size of lse); compute: the dtype the kernels computed in (f32, or f64 for f64
// inputs).
Slack compute_slack(const AttentionCase& c, const AttentionOutput& forward, DType compute);

}  // namespace qkv::fuzz
