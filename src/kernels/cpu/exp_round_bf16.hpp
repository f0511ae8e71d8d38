#pragma once

// The bf16 forward's softmax row in one pass with the CPU's own bf16 rounding (VCVTNEPS2BF16):
// rounded [n] <- bf16(exp(scale * s[c] - shift)), the product rounded to f32 before the
// subtraction (as scale_rows rounds it), exp as tile-inl.h's exp_softmax computes it, operation
// for operation; returns the sum of the f32 exps. n is a multiple of 16. The instruction rounds
// to nearest even as qkv::f32_to_bf16_bits does and quiets NaNs alike; it differs only in
// flushing subnormal results, which exp_softmax gives only for arguments below -87.3, to 0.

#include <cstdint>

namespace qkv::kernels::cpu {

using ExpRoundRow = float (*)(const float* s, float scale, float shift, std::uint16_t* rounded,
                              std::int64_t n);

// exp_round_row_avx512bf16 where this CPU runs it (AVX512-BF16), else null: then the kernels
// scale, exp and round with Highway (softmax_state-inl.h's row_exp_bf16). Tests can make it
// null with force_portable_rounding(true) to run that way on any machine.
ExpRoundRow native_exp_round_row();
void force_portable_rounding(bool portable);

// Compiled with -mavx512f -mavx512bf16 -ffp-contract=off (CMakeLists.txt); called only through
// native_exp_round_row.
float exp_round_row_avx512bf16(const float* s, float scale, float shift, std::uint16_t* rounded,
                               std::int64_t n);

}  // namespace qkv::kernels::cpu
