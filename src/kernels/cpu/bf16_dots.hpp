#pragma once

// The scores of decode shapes (Tq <= TileTraits::kDecodeMaxQueries) where q, k and v are all bf16:
// dot products of the bf16 rows as they lie, two products a step in f32 (VDPBF16PS), then times
// the scale in f32, as the tiled forward's bf16 products compute S = scale * (Q K^T). The decode
// forward (flash_decode.cpp) and the backward's tiles of decode shapes (flash_bwd.cpp) both take
// their scores from here, so that the backward recomputes bitwise the scores the forward's lse came
// from (score_dot-inl.h says why); decode_bf16_dots tells both whether to. Half the multiply-adds
// of the f32 dot products over the same cache, and no conversion of K.
//
// Each score is one chain over the row: 16 f32 lanes, lane l adding the products of elements 2l
// and 2l + 1 of every 32 (the last 32 zero-padded), then the 16 lanes summed in one tree (lane i
// with i + 8, then i + 4, i + 2 and i + 1), then the scale. The bits of a score do not depend on
// the rows and keys around it in a call. Per path (bf16_gemm.hpp's MatrixPath):
// - avx512_bf16 (and amx_bf16: every CPU with AMX has AVX512-BF16): VDPBF16PS, with the hardware's
//   rounding of its two products (its bits, which need not be the manual's sequence);
// - amx_emulated: the manual's sequence in scalar code (odd element, then even, each product
//   added and rounded, subnormal inputs and results flushed to zero), so that the decode paths'
//   use of these dots is tested on any CPU.

#include <cstdint>

#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/params.hpp"

namespace qkv::kernels::cpu {

// The most query rows and keys one bf16_score_dots call takes.
inline constexpr std::int64_t kBf16DotRows = 8;
inline constexpr std::int64_t kBf16DotKeys = 16;

// Whether a decode shape d of bf16 q, k and v takes its scores from bf16_score_dots (true, and on
// which path): where a k/v head has TileTraits::kDecodeGroupedRows query rows or more (G Tq), in
// place of the f32 products of each tile of K converted, and decode_bf16_path says so. Fewer
// rows keep score_dot: with the dots from memory, one row took 1.08-1.12x the time and two
// 1.02-1.06x (a driver alternating the paths call by call, qkv::attention_forward on bf16 q, k
// and v, a heads-first cache of Hk 8, D 128, Tq 1, 2 threads, AMD EPYC (family 25, model 17) Zen
// 4 VM, 2026-11-29, Tk 16384 and 65536, two rounds), four 0.94-1.02 (but 0.77 in cache, Tk 1024
// and 4096), eight (Hq 64) 0.77-0.80 over the grouped products (bench/README.md).
bool decode_bf16_dots(const Dims& d, MatrixPath& path);

// s[r][c] <- scale * (q[r] . k[c ldk]) over dim elements, for the rows r in [0, rows) (at most
// kBf16DotRows) and the keys c in [0, n) (at most kBf16DotKeys): q [rows][dim] and k [n, ldk] bf16
// bits, s [rows][n].
void bf16_score_dots(MatrixPath path, const std::uint16_t* const* q, std::int64_t rows,
                     const std::uint16_t* k, std::int64_t ldk, std::int64_t n, std::int64_t dim,
                     float scale, float* const* s);

// The two paths (bf16_dots_avx512.cpp, compiled for AVX512-BF16; bf16_dots.cpp), called only
// through bf16_score_dots.
void bf16_score_dots_avx512(const std::uint16_t* const* q, std::int64_t rows,
                            const std::uint16_t* k, std::int64_t ldk, std::int64_t n,
                            std::int64_t dim, float scale, float* const* s);
void bf16_score_dots_emulated(const std::uint16_t* const* q, std::int64_t rows,
                              const std::uint16_t* k, std::int64_t ldk, std::int64_t n,
                              std::int64_t dim, float scale, float* const* s);

}  // namespace qkv::kernels::cpu
