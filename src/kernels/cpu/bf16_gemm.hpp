#pragma once

// bf16 matrix products with f32 accumulation on the CPU's matrix units, C = A B, in the layout
// AMX tiles and VDPBF16PS read:
// - A [m_tiles * 16, k_chunks * 32] bf16, row-major with leading dimension lda (elements);
// - B [k_chunks * 32, n_tiles * 16] bf16 in pairs ("VNNI"): element (k, n) at
//   ((k / 2) * N + n) * 2 + k % 2, N = n_tiles * 16, so one 32-bit word holds rows k and k + 1 of
//   a column (pack_pairs_rows and pack_pairs_transposed write it);
// - C [m_tiles * 16, n_tiles * 16] f32 with leading dimension ldc (elements), overwritten.
// Each C element is a sum of exact bf16 x bf16 products rounded in f32 steps (two products per
// step, in the order of k), whatever the path; the paths differ only in that order's grouping
// and in flushing subnormals (the hardware's DAZ/FTZ), never by more than f32 rounding.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qkv::kernels::cpu {

inline constexpr std::int64_t kUnitRows = 16;   // rows of a C or A tile
inline constexpr std::int64_t kUnitCols = 16;   // f32 columns of a C tile
inline constexpr std::int64_t kUnitDepth = 32;  // bf16 of an A tile row (64 bytes)

enum class MatrixPath : std::uint8_t {
  amx_bf16,      // AMX tiles, TDPBF16PS (Intel Sapphire Rapids and later)
  avx512_bf16,   // VDPBF16PS on zmm registers (Intel Cooper Lake and later, AMD Zen 4 and later)
  amx_emulated,  // the AMX kernel over tiles emulated in scalar code: runs anywhere, for tests
};

const char* path_name(MatrixPath path);

// Whether this CPU (and OS) runs path; amx_emulated always.
bool path_available(MatrixPath path);

// The fastest path this CPU runs for the fused kernels' bf16 products, or none (false): then they
// convert bf16 to f32 as they pack and compute in f32.
bool best_bf16_path(MatrixPath& path);

// The tiled forward takes bf16 products from this many keys: below, packing K and V into pairs
// and Q into tiles of 16 rows costs about what the products save. `qkv bench --dtype bf16 --pass
// fwd`, B 1, H 8, 2 threads of an AMD EPYC (avx2 avx512_bf16 avx512f), 2026-11-24, three
// alternated runs, ms with f32 products / bf16 products from every Tk (D 64, then D 128; nc: not
// causal, c: causal): Tk 128 nc 0.23 / 0.27, 0.25 / 0.32, c 0.10 / 0.12, 0.18 / 0.22; Tk 256 nc
// 0.65 / 0.65, 1.10 / 0.84, c 0.30 / 0.35, 0.54 / 0.63; Tk 512 nc 2.1 / 1.8, 2.9 / 3.0, c
// 0.9-1.4 / 1.0-1.3, 1.7-2.3 / 1.8-2.3; Tk 1024 nc 6.0-6.4 / 5.3-5.6, 11.3-12.2 / 8.2-8.4, c
// 3.3-3.5 / 3.0, 6.1-6.4 / 5.3; Tk 2048 nc 22.8-23.8 / 18.9-19.2, 42.1-42.9 / 32.2-33.0, c
// 12.4-13.3 / 10.1-10.9, 23.3-25.1 / 17.7-18.6. From 1024 keys the bf16 products win every row.
inline constexpr std::int64_t kBf16MinKeys = 1024;

// On AMX the bf16 products win from the fewest keys. A driver timing attention_forward on bf16
// q, k, v (B 1, H 8, Tq = Tk, medians of 31) with the f32 products forced against the AMX ones, 2
// threads of an Intel Xeon (AVX512-BF16, AMX), 2026-11-27, ms f32 / AMX, not causal then causal:
// D 64: T 32 0.075 / 0.046, 0.073 / 0.060; T 64 0.087 / 0.095, 0.111 / 0.088; T 128 0.43 / 0.22,
// 0.29 / 0.18; T 256 1.07 / 0.40, 0.76 / 0.33; T 512 3.10 / 1.25, 2.13 / 0.84; T 1024 9.09 /
// 3.89, 5.90 / 3.05. D 128: T 32 0.083 / 0.062; T 64 0.147 / 0.105; T 128 0.50 / 0.26; T 1024 19.1
// / 6.4. Forward and backward together: D 64 T 32 0.200 / 0.199, T 128 0.93 / 0.71, T 1024 29.4 /
// 15.1; D 128 T 32 0.303 / 0.313, T 64 0.56 / 0.50, T 1024 64.1 / 30.2. So AMX from any Tk.
inline constexpr std::int64_t kAmxMinKeys = 0;

// The path of the fused forward's bf16 products for Tk keys (true), or none: best_bf16_path from
// kAmxMinKeys keys for AMX and kBf16MinKeys for the others, unless a test forced a choice
// (whatever Tk).
bool fused_bf16_path(std::int64_t Tk, MatrixPath& path);

// Whether decode shapes of bf16 q, k and v take their scores from bf16_score_dots (bf16_dots.hpp;
// true, and on which path): wherever the CPU has AVX512-BF16 (from any Tk: they pack nothing),
// unless a test forced the fused path (none keeps the f32 dot products; amx_emulated takes the
// emulated dots; a hardware path, VDPBF16PS).
bool decode_bf16_path(MatrixPath& path);

// For tests, process-wide: the fused forward's bf16 products on path (available), or with nullopt
// none (f32 compute), until reset_fused_path().
void force_fused_path(std::optional<MatrixPath> path);
void reset_fused_path();

// For tests and the fuzzer: force_fused_path(path) for as long as the guard lives.
struct ForcedFusedPath {
  explicit ForcedFusedPath(std::optional<MatrixPath> path) { force_fused_path(path); }
  ~ForcedFusedPath() { reset_fused_path(); }
  ForcedFusedPath(const ForcedFusedPath&) = delete;
  ForcedFusedPath& operator=(const ForcedFusedPath&) = delete;
};

// C = A B as above, or C += A B with accumulate (C's f32 values are the sums' starting values), on
// path (which must be available).
void bf16_gemm(MatrixPath path, std::int64_t m_tiles, std::int64_t n_tiles, std::int64_t k_chunks,
               const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, float* c,
               std::int64_t ldc, bool accumulate = false);

// While one lives on a thread, the AMX path keeps its tile configuration between bf16_gemm calls
// on that thread and releases the tiles when the outermost scope ends; without one each call
// configures and releases them. LDTILECFG and TILERELEASE cost ~150-190 ns a call: a [128, 64] x
// [64, 64] product (the forward's S = Q K^T at D = 64) took 882 ns with them and 742 without, one
// core of an Intel Xeon (AVX512-BF16, AMX), 2026-11-27. A kernel holds one per thread around its
// tiles, and no code but qkv's runs on the thread within it, so no other configuration can come
// in between.
class MatrixTileScope {
 public:
  MatrixTileScope();
  ~MatrixTileScope();
  MatrixTileScope(const MatrixTileScope&) = delete;
  MatrixTileScope& operator=(const MatrixTileScope&) = delete;
};

// The two paths compiled with their own instruction sets (bf16_gemm_avx512.cpp,
// bf16_gemm_amx.cpp); called only through bf16_gemm, the AMX one with its tiles configured by
// amx_configure (amx_tiles.hpp's gemm_tile_config) and released by amx_release.
void bf16_gemm_avx512(std::int64_t m_tiles, std::int64_t n_tiles, std::int64_t k_chunks,
                      const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, float* c,
                      std::int64_t ldc, bool accumulate);
void bf16_gemm_amx(std::int64_t m_tiles, std::int64_t n_tiles, std::int64_t k_chunks,
                   const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, float* c,
                   std::int64_t ldc, bool accumulate);
void amx_configure();
void amx_release();

}  // namespace qkv::kernels::cpu
