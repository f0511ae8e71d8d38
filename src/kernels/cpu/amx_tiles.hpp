#pragma once

// The AMX kernel of bf16_gemm.hpp, written once over a tile unit: the hardware's tile
// instructions (bf16_gemm_amx.cpp) or their scalar emulation (amx_emulated.hpp), which share the
// tile configuration, the tile numbers and the strides, so the tests run the kernel's packing and
// tile logic on any machine.

#include <cstdint>

#include "kernels/cpu/bf16_gemm.hpp"

namespace qkv::kernels::cpu {

// ldtilecfg's 64-byte operand, palette 1: per tile its rows and its bytes per row.
struct TileConfig {
  std::uint8_t palette_id = 0;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

// Tiles 0-3 hold four C tiles side by side (16 x 64 f32), tile 4 the A tile, tiles 5 and 6 the B
// tiles in turn; all 16 rows of 64 bytes.
inline TileConfig gemm_tile_config() {
  TileConfig config;
  config.palette_id = 1;
  for (int t = 0; t < 7; ++t) {
    config.rows[t] = static_cast<std::uint8_t>(kUnitRows);
    config.colsb[t] = 64;
  }
  return config;
}

// C tile g (g < 4) += the A tile times the B tile for column tile nt + g at depth chunk kc.
template <int kG, class Unit>
void amx_step(Unit& unit, std::int64_t n_tiles, std::int64_t nt, std::int64_t kc,
              const std::uint16_t* b, std::int64_t ldb_bytes) {
  constexpr int kB = 5 + kG % 2;
  if (nt + kG >= n_tiles) return;
  const std::int64_t pairs_per_chunk = kUnitDepth / 2;
  unit.template load<kB>(
      b + (kc * pairs_per_chunk) * (n_tiles * kUnitCols * 2) + (nt + kG) * kUnitCols * 2,
      ldb_bytes);
  unit.template dpbf16ps<kG, 4, kB>();
}

// C tile g starts from C's values (accumulate) or from 0.
template <int kG, class Unit>
void amx_start(Unit& unit, std::int64_t n_tiles, std::int64_t nt, const float* c, std::int64_t ldc,
               bool accumulate) {
  if (accumulate && nt + kG < n_tiles) {
    unit.template load<kG>(c + (nt + kG) * kUnitCols, ldc * static_cast<std::int64_t>(4));
  } else {
    unit.template zero<kG>();
  }
}

template <int kG, class Unit>
void amx_store(Unit& unit, std::int64_t n_tiles, std::int64_t nt, float* c, std::int64_t ldc) {
  if (nt + kG < n_tiles) {
    unit.template store<kG>(c + (nt + kG) * kUnitCols, ldc * static_cast<std::int64_t>(4));
  }
}

// C = A B, or C += A B with accumulate (bf16_gemm.hpp's shapes and layouts), on unit, whose tiles
// the caller configured with gemm_tile_config(): for each 16-row band, four column tiles at a time
// accumulate in tiles 0-3 over the depth, one A tile load feeding four products.
template <class Unit>
void amx_gemm(Unit& unit, std::int64_t m_tiles, std::int64_t n_tiles, std::int64_t k_chunks,
              const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, float* c,
              std::int64_t ldc, bool accumulate) {
  const std::int64_t ldb_bytes = n_tiles * kUnitCols * 4;  // one pair row of B
  for (std::int64_t mt = 0; mt < m_tiles; ++mt) {
    const std::uint16_t* a_band = a + mt * kUnitRows * lda;
    float* c_band = c + mt * kUnitRows * ldc;
    for (std::int64_t nt = 0; nt < n_tiles; nt += 4) {
      amx_start<0>(unit, n_tiles, nt, c_band, ldc, accumulate);
      amx_start<1>(unit, n_tiles, nt, c_band, ldc, accumulate);
      amx_start<2>(unit, n_tiles, nt, c_band, ldc, accumulate);
      amx_start<3>(unit, n_tiles, nt, c_band, ldc, accumulate);
      for (std::int64_t kc = 0; kc < k_chunks; ++kc) {
        unit.template load<4>(a_band + kc * kUnitDepth, lda * static_cast<std::int64_t>(2));
        amx_step<0>(unit, n_tiles, nt, kc, b, ldb_bytes);
        amx_step<1>(unit, n_tiles, nt, kc, b, ldb_bytes);
        amx_step<2>(unit, n_tiles, nt, kc, b, ldb_bytes);
        amx_step<3>(unit, n_tiles, nt, kc, b, ldb_bytes);
      }
      amx_store<0>(unit, n_tiles, nt, c_band, ldc);
      amx_store<1>(unit, n_tiles, nt, c_band, ldc);
      amx_store<2>(unit, n_tiles, nt, c_band, ldc);
      amx_store<3>(unit, n_tiles, nt, c_band, ldc);
    }
  }
}

}  // namespace qkv::kernels::cpu
