#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

// Tile sizes of the fused kernels. kBlockK must be a multiple of the widest vector (16 f32 lanes
// in AVX-512) so that row operations on a score tile need no tail.
// TODO(bench): measured choice recorded in bench/README.md.
struct TileTraits {
  static constexpr std::int64_t kBlockQ = 64;
  static constexpr std::int64_t kBlockK = 64;
  // Decode: at most this many queries take the split-keys path, with chunks of this many keys.
  static constexpr std::int64_t kDecodeMaxQueries = 16;
  static constexpr std::int64_t kDecodeSplit = 1024;
  static_assert(kDecodeMaxQueries <= kBlockQ, "decode rows fit one q-block");
  static_assert(kDecodeSplit % kBlockK == 0, "decode chunks hold whole k-blocks");
  static_assert(kBlockK % 16 == 0, "a score-tile row must be whole vectors");
  static_assert(kBlockQ % 4 == 0, "q blocks hold whole register tiles of rows");
};

}  // namespace qkv::kernels::cpu
