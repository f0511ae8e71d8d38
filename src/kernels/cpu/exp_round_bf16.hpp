#pragma once

// The bf16 kernels' roundings by the CPU's own instructions (VCVTNEPS2BF16, VCVTNE2PS2BF16). First
// the bf16 forward's softmax row in one pass:
// rounded [n] <- bf16(exp(scale * s[c] - shift)), the product rounded to f32 before the
// subtraction (as scale_rows rounds it), exp as tile-inl.h's exp_for_bf16 computes it, operation
// for operation; returns the sum of the f32 exps. n is a multiple of 16. The instruction rounds
// to nearest even as qkv::f32_to_bf16_bits does and quiets NaNs alike; it differs only in
// flushing subnormal results, which exp_for_bf16 gives only for arguments below -87.3, to 0.

#include <cstdint>

namespace qkv::kernels::cpu {

// exp_for_bf16's polynomial (tile-inl.h has how it was fitted and its error), shared by the
// Highway and the AVX512-BF16 code so that both compute the same bits.
inline constexpr float kExpBf16C1 = 0.9999668598175049f;
inline constexpr float kExpBf16C2 = 0.5000301599502563f;
inline constexpr float kExpBf16C3 = 0.1678747534751892f;
inline constexpr float kExpBf16C4 = 0.04151385650038719f;

using ExpRoundRow = float (*)(const float* s, float scale, float shift, std::uint16_t* rounded,
                              std::int64_t n);

// dst [n] <- x [n] rounded to bf16 bits (round_bf16-inl.h's round_bf16), any n.
using RoundRun = void (*)(const float* x, std::uint16_t* dst, std::int64_t n);
// dst [2 n] <- rows even and odd [n] (odd null: zeros) rounded and interleaved in pairs
// (round_bf16-inl.h's round_bf16_pairs), any n.
using RoundPairs = void (*)(const float* even, const float* odd, std::uint16_t* dst,
                            std::int64_t n);

// The functions below where this CPU runs them (AVX512-BF16, with AVX512-BW and VL for the
// masked tails), else null: then the kernels scale, exp and round with Highway
// (softmax_state-inl.h's row_exp_bf16, round_bf16-inl.h). Tests can make them null with
// force_portable_rounding(true) to run that way on any machine.
ExpRoundRow native_exp_round_row();
RoundRun native_round_run();
RoundPairs native_round_pairs();
void force_portable_rounding(bool portable);

// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 -ffp-contract=off
// (CMakeLists.txt); called only through the native_ functions above.
float exp_round_row_avx512bf16(const float* s, float scale, float shift, std::uint16_t* rounded,
                               std::int64_t n);
void round_run_avx512bf16(const float* x, std::uint16_t* dst, std::int64_t n);
void round_pairs_avx512bf16(const float* even, const float* odd, std::uint16_t* dst,
                            std::int64_t n);

}  // namespace qkv::kernels::cpu
