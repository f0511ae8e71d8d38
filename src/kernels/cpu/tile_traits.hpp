#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

constexpr std::int64_t round_up(std::int64_t x, std::int64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

// Tile sizes of the fused kernels. kBlockK must be a multiple of the widest vector (16 f32 lanes
// in AVX-512) so that row operations on a score tile need no tail.
//
// How they were chosen (2-core Zen 3 VM, AVX2, 2 threads, 2026-11-23): each variant built as its
// own library, then timed by a driver that alternates one attention call with a burst of FMA
// chains on the same threads and reports the median of (attention GFLOP/s) / (burst GFLOP/s)
// over 9 calls, which cancels the 2x swings of this shared host. B = 1, H = 8, forward:
//
//   kBlockQ x kBlockK   T=1024 D=64   T=4096 D=64 causal   T=2048 D=128
//        32 x 64           0.63            0.61               0.69
//        64 x 64           0.64            0.64               0.71
//        64 x 128          0.66            0.63               0.60
//       128 x 64           0.53            0.63               0.65
//       128 x 128          0.64            0.58               0.70
//        64 x 256          0.67            0.62               0.71
//
// and the backward at T = 2048 (D=64 / D=128 causal): 64 x 64 0.57 / 0.58, 32 x 64 0.61 / 0.57,
// 64 x 128 0.65 / 0.52, 128 x 64 0.67 / 0.66, 128 x 128 0.62 / 0.55, with a spread of +-0.1
// between calls. No variant is better beyond the noise, so 64 x 64 stays: the smallest scratch
// (a 16 KiB score tile), whole 6-row register tiles but for a 4-row tail, and short causal
// diagonals.
//
// The forward's q-block, remeasured once its exp was cheaper (2026-11-23, `qkv bench --peak`
// fwd rows, binaries alternated 3-4 times, median fraction of the FMA burst during the row,
// 64 -> 128 rows): T = 8192 D = 64 0.61 -> 0.65, causal 0.62 -> 0.65; T = 4096: D = 64 0.63 ->
// 0.66, causal 0.54 -> 0.58, D = 128 0.58 -> 0.64, causal 0.60 -> 0.70; T = 2048: D = 128 0.58
// -> 0.72, D = 64 0.68 -> 0.63 and 0.68 -> 0.67 in a second run (differences under ~0.05 are this
// host's noise); T = 1024: D = 64 0.58 -> 0.60, causal 0.60 -> 0.51, D = 128 0.65 -> 0.67. A
// one-thread probe shows why: with K and V streaming from L3 (T = 4096, D = 128), the two products
// of a 64-row block ran at ~0.70 of the FMA rate and those of a 128-row block at ~0.85, each K and
// V tile fetched serving twice the rows; where a head's K and V (Tk (D + Dv) 4 bytes) are at most 1
// MiB, the cache keeps them anyway, and the bigger block only added diagonal work under a causal
// mask (12% of the work at T = 1024 instead of 6%; since 2026-11-28 a diagonal tile skips the half
// of its rows that keeps none of its keys, and 128 rows for causal T = 2048 D = 64 then measured
// the same as 64, one thread of the Zen 5 VM, four alternated runs: 69.0-70.0% of the FMA burst
// during the row against 69.7-70.3%). So 128 rows above kForwardLargeKv bytes of K
// and V per head, 64 below. The backward, whose items reuse a K tile across all q-blocks anyway,
// measured no difference and keeps 64.
struct TileTraits {
  static constexpr std::int64_t kBlockQ = 64;
  static constexpr std::int64_t kForwardBlockQ = 128;
  static constexpr std::int64_t kForwardLargeKv = std::int64_t{1} << 20;
  // Rows per forward q-block for heads whose K and V take kv_bytes (see above).
  static constexpr std::int64_t forward_block_q(std::int64_t kv_bytes) {
    return kv_bytes > kForwardLargeKv ? kForwardBlockQ : kBlockQ;
  }
  static constexpr std::int64_t kBlockK = 64;
  // Decode: up to kDecodeMaxQueries queries take the split-keys path, which reads K and V once,
  // key by key, with dot products instead of packed tiles. Same driver, Tk = 16384, D = 128,
  // H = 8, split-keys / tiled: Tq = 1 0.096 / 0.011, 4 0.22 / 0.036, 16 0.22 / 0.14, 32 0.24 /
  // 0.21 (D = 64, H = 32: 0.185 / 0.182), 64 0.24 / 0.35. The crossover is near 32; 16 keeps a
  // clear margin.
  static constexpr std::int64_t kDecodeMaxQueries = 16;
  // And up to kDecodeLongQueries queries against kDecodeLongKeys keys or more (a chunk of a
  // prompt, or a speculative draft, against a long cache), where the tiled path's packing of every
  // K and V tile costs more than the split-keys path's row-by-row products save. A driver
  // switching the two call by call (qkv::attention_forward, H 8, D 128, 2 threads, AMD EPYC
  // (family 25, model 17) Zen 4 VM, 2026-11-30, after the packing went into AVX-512 registers,
  // two rounds, split keys over tiled): heads first bf16 Tq 17 / 24 / 32 at Tk 4096 0.51-0.53 /
  // 0.62-0.63 / 0.84-0.90, f16 0.70-0.72 / 0.77-0.80 / 0.87-0.90, f32 0.84-0.85 / 0.89 /
  // 0.86-1.03; Hq 32 over Hk 8 Tq 17 at 16384: bf16 0.60, f16 0.65-0.66, f32 0.57-0.59; [B, T, H,
  // D] Tq 24 at 4096 bf16 0.78, f16 0.73, f32 0.95, but at 2048 f32 1.14, and Tq 32 (bottom-right
  // causal, 4096) bf16 1.04-1.05; Tq 64 up to 1.17 ([B, T, H, D] bf16). Against few keys the
  // tiles win by far (Tq 32, Tk 128 to 1024, f32: 1.46-2.46x), and square causal shapes, whose
  // diagonal tiles the split-keys path walks key by key, 1.6-2.5x (B 32, H 4, T 24 to 64, D 32).
  static constexpr std::int64_t kDecodeLongQueries = 24;
  static constexpr std::int64_t kDecodeLongKeys = 4096;
  // Whether a problem of Tq queries and Tk keys takes the split-keys path (flash_decode.cpp)
  // forward, and so its scores the decode shapes' way backward (flash_bwd.cpp).
  static constexpr bool decode_shape(std::int64_t Tq, std::int64_t Tk) {
    return Tq <= kDecodeMaxQueries || (Tq <= kDecodeLongQueries && Tk >= kDecodeLongKeys);
  }
  // Keys per split, from `qkv bench --peak` decode rows (Tq = 1, D = 128, H = 8, GB/s of K and
  // V, two runs each) with splits of 256 / 1024 / 4096: Tk = 4096: 12.3 12.0 / 12.3 13.7 /
  // 7.5 6.6 (one split: one thread); Tk = 16384: 12.0 12.0 / 12.7 12.1 / 14.2 12.2; Tk = 65536:
  // 14.2 13.4 / 11.4 12.0 / 12.8 12.3. Within the noise but for 4096's single split; 1024 gives
  // 2 threads work from Tk = 2048 on and keeps the merge small.
  static constexpr std::int64_t kDecodeSplit = 1024;
  // Decode: a k/v head's query rows (its G heads' Tq rows, head-major as S lays them out: g * Tq +
  // i) take their products as small matrix products instead of dot products from this many rows on.
  // A driver timing qkv::attention_forward on an f16 cache (Hk = 8, D = 128, 2 threads, AMD EPYC
  // (avx2 avx512_bf16 avx512f), 2026-11-24, medians of 11, two alternated runs, ms at Tk = 4096 /
  // 16384 / 65536, dot products -> products): 16 rows (Hq 32 Tq 4) 3.2 / 13.8-14.0 / 55.6-55.8
  // -> 1.0-1.1 / 5.0-5.3 / 20.0-21.2; 8 rows (Hq 32 Tq 2) 1.15-1.20 / 5.8-6.6 / 23.4 -> 0.74-0.77
  // / 3.9-4.0 / 16.1-16.9; but 4 rows: Hq 32 Tq 1 0.71-0.74 / 3.1-3.2 / 11.9-12.0 -> 0.55 /
  // 3.1-3.2 / 12.9-13.7, Hq 8 Tq 4 0.51 / 2.2-2.8 / 9.1-9.2 -> 0.53 / 3.1 / 12.7-13.1; and 2 rows
  // (Hq 16 Tq 1) 0.37-0.40 / 1.7 / 7.0-7.4 -> 0.52-0.69 / 2.9-3.0 / 12.0-12.3. Below 8 rows,
  // converting and transposing each tile of K costs more than the dot products it saves.
  // Since then the dot products' P V went whole tiles (values_rows), and at 8 rows they win where
  // K and V lie heads first: the same driver on an f16 cache (Zen 4 VM, family 25 model 17,
  // 2026-11-29, the two switched call by call in one build, two rounds, time of the dot products
  // over the products'): heads first Hq 64 over Hk 8 at Tk 4096 0.72-0.76, 16384 0.69-0.71 (f32
  // cache 0.69), 65536 0.72-0.74; Hq 32 Tq 2 at 65536 0.75; Hq 8 Tq 8 at 16384 0.79; [B, T, H,
  // D] 0.99-1.08 (f16) and 0.87-0.88 (f32 cache, Hq 64 at 16384). The backward's decode shapes
  // (f32, the same switch) 1.00-1.03. So 8 rows take the dot products, as many as a group of them
  // holds (kDotRows, score_dot-inl.h); from 9 on, the products.
  // The backward recomputes those scores the same way (flash_bwd.cpp's tile_scores), so that
  // P = exp(s - lse) sees the forward's rounding of s.
  static constexpr std::int64_t kDecodeGroupedRows = 9;
  static_assert(kDecodeLongQueries <= kForwardBlockQ, "decode rows fit one q-block");
  static_assert(kDecodeSplit % kBlockK == 0, "decode chunks hold whole k-blocks");
  static_assert(kBlockK % 16 == 0, "a score-tile row must be whole vectors");
  static_assert(kForwardBlockQ % 16 == 0, "a q-block's row factors are whole vectors");
  static_assert(kBlockQ % 4 == 0, "q blocks hold whole register tiles of rows");
};

}  // namespace qkv::kernels::cpu
