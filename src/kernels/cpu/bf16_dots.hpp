#pragma once

// The scores of decode shapes (TileTraits::decode_shape) where q, k and v are all bf16:
// dot products of the bf16 rows as they lie, two products a step in f32 (VDPBF16PS), then times
// the scale in f32, as the tiled forward's bf16 products compute S = scale * (Q K^T). The decode
// forward (flash_decode.cpp) and the backward's tiles of decode shapes (flash_bwd.cpp) both take
// their scores from here, so that the backward recomputes bitwise the scores the forward's lse came
// from (score_dot-inl.h says why); decode_bf16_dots tells both whether to. Half the multiply-adds
// of the f32 dot products over the same cache, and no conversion of K. The decode forward's P V
// of full tiles likewise (bf16_values), P rounded to bf16 as the tiled forward rounds it.
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

// The most query rows and keys one bf16_score_dots call takes: the rows of a decode shape's k/v
// head 16 at a time (as many as the rows in lanes hold) and a tile of keys (TileTraits::kBlockK).
inline constexpr std::int64_t kBf16DotRows = 16;
inline constexpr std::int64_t kBf16DotKeys = 64;

// From this many rows a call and up to kBf16LaneSteps steps of 32 elements a row (dim 128), the
// AVX-512 path holds the rows in lanes (bf16_score_lanes_avx512.cpp), with the same bits: 64 of
// its instructions a key whatever the rows, against ~6.4 cycles a row and key for the tree (a
// scratch program, D 128, K in L2: 16 rows 5.4-6.0 cycles a row and key against 6.2-6.6). In
// decode (qkv::attention_forward, bf16, heads first, D 128, 2 threads, AMD EPYC (family 25, model
// 17) Zen 4 VM, 2026-11-30, the two switched call by call, two rounds), time over the tree's: 16
// rows a k/v head (Tq 16 over Hq 8) 0.92-0.94 at Tk 4096 and 0.86-0.95 at 65536, [B, T, H, D]
// 0.95-0.96 at 16384; 64 rows (Hq 32 over Hk 2, Tq 4) 0.91-0.92; 12 rows (Tq 12) 0.99-1.04, so
// the rule starts between. Rows of 8 lanes (VDPBF16PS on 256 bits, 1.5 a cycle here) took
// 1.06-1.08x the tree's time at 8 rows (Hq 64 over Hk 8).
inline constexpr std::int64_t kBf16LaneRows = 14;
inline constexpr std::int64_t kBf16LaneSteps = 4;

// From this many query rows a k/v head, bf16 decode takes the bf16 dots. A driver alternating them
// with the f32 path call by call (qkv::attention_forward on bf16 q, k and v, Hk 8, D 128, 2
// threads, AMD EPYC (family 25, model 17) Zen 4 VM, 2026-11-29, medians of 9-41 calls, two
// rounds, Tk 1024 to 65536, time over the f32 path; hf: heads-first cache, bthd: [B, T, H, D]):
// 8 rows (Hq 64) hf 0.58-0.69, bthd 0.56-0.77; 4 rows (Hq 32) hf 0.86-0.93, bthd 0.56-0.71 (at
// Tk 65536 against its key-by-key step). Since bf16_values interleaves V in registers (the same
// VM and driver, later that day, 11-41 calls, two rounds): 3 rows (Hq 24) at Tk 65536 hf
// 0.87-0.88, bthd 0.89-0.91; 2 rows (Hq 16, or Tq 2) at Tk 65536 hf 1.18-1.23, bthd 1.11-1.16,
// though 0.53-0.88 at Tk 4096 (in L3); 1 row at Tk 65536 1.31-1.32 hf, 1.60-1.62 bthd. From
// memory, the f32 path's 1 and 2 rows already run near the memory's speed (bench/README.md).
inline constexpr std::int64_t kBf16DecodeRows = 3;

// Whether a decode shape d of bf16 q, k and v takes its scores from bf16_score_dots and its full
// tiles' P V from bf16_values (true, and on which path): where a k/v head has kBf16DecodeRows
// query rows or more (G Tq) and decode_bf16_path says so.
bool decode_bf16_dots(const Dims& d, MatrixPath& path);

// s[r][c] <- scale * (q[r] . k[c ldk]) over dim elements, for the rows r in [0, rows) (at most
// kBf16DotRows) and the keys c in [0, n) (at most kBf16DotKeys): q [rows][dim] and k [n, ldk] bf16
// bits, s [rows][n].
void bf16_score_dots(MatrixPath path, const std::uint16_t* const* q, std::int64_t rows,
                     const std::uint16_t* k, std::int64_t ldk, std::int64_t n, std::int64_t dim,
                     float scale, float* const* s);

// The most keys one bf16_values call takes: a tile of the decode kernels (TileTraits::kBlockK).
inline constexpr std::int64_t kBf16ValueKeys = 64;

// acc[r][0, dv) += sum over the keys c in [0, n) of bf16(p[r][c]) v[c ldv][0, dv), for the rows r
// in [0, rows) (at most kBf16DotRows) and n at most kBf16ValueKeys: p [rows][n] f32 weights,
// rounded to bf16 (nearest, ties to even), v [n, ldv] bf16 bits, acc [rows][dv] f32. Per column,
// the keys in pairs (c, c + 1) in order, a last odd key with a zero: each pair's two exact
// products added to acc in one VDPBF16PS step (the emulated path: the odd key's, then the even
// key's, each rounded; subnormal inputs and results flushed to zero).
void bf16_values(MatrixPath path, const float* const* p, std::int64_t rows, const std::uint16_t* v,
                 std::int64_t ldv, std::int64_t n, std::int64_t dv, float* const* acc);

// The two paths (bf16_dots_avx512.cpp, compiled for AVX512-BF16; bf16_dots.cpp), called only
// through bf16_score_dots and bf16_values.
void bf16_score_dots_avx512(const std::uint16_t* const* q, std::int64_t rows,
                            const std::uint16_t* k, std::int64_t ldk, std::int64_t n,
                            std::int64_t dim, float scale, float* const* s);
void bf16_score_lanes_avx512(const std::uint16_t* const* q, std::int64_t rows,
                             const std::uint16_t* k, std::int64_t ldk, std::int64_t n,
                             std::int64_t dim, float scale, float* const* s);
void bf16_score_dots_emulated(const std::uint16_t* const* q, std::int64_t rows,
                              const std::uint16_t* k, std::int64_t ldk, std::int64_t n,
                              std::int64_t dim, float scale, float* const* s);

void bf16_values_avx512(const float* const* p, std::int64_t rows, const std::uint16_t* v,
                        std::int64_t ldv, std::int64_t n, std::int64_t dv, float* const* acc);
void bf16_values_emulated(const float* const* p, std::int64_t rows, const std::uint16_t* v,
                          std::int64_t ldv, std::int64_t n, std::int64_t dv, float* const* acc);

}  // namespace qkv::kernels::cpu
