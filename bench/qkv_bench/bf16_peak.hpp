#pragma once

// The bf16 products' peak, measured on the matrix path the kernels use: chains of VDPBF16PS or
// TDPBF16PS on the calling thread (bf16_peak_avx512.cpp, bf16_peak_amx.cpp, each compiled with
// its own instruction set and called only where qkv::matrix_paths() lists its path).

#include <cstdint>

namespace qkv::bench {

inline constexpr int kBf16Chains = 12;

// `iterations` steps of kBf16Chains VDPBF16PS on zmm registers; returns the FLOPs done, writes a
// sum of the results to *sink (so the chains cannot be dropped).
double vdpbf16ps_chains(std::int64_t iterations, float* sink);

// `iterations` steps of four TDPBF16PS (one per accumulator tile); the same contract.
double tdpbf16ps_chains(std::int64_t iterations, float* sink);

}  // namespace qkv::bench
