// The AMX peak: TDPBF16PS into four accumulator tiles of 16 x 16 f32 from one A tile (16 x 32
// bf16) and one B tile (16 pairs x 16 columns), each instruction 16 x 16 x 32 x 2 FLOPs. Compiled
// with -mamx-tile -mamx-bf16 (bench/CMakeLists.txt) and called only where qkv::matrix_paths()
// lists amx-bf16 (which also means Linux granted this process the tile data).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "qkv_bench/bf16_peak.hpp"

namespace qkv::bench {
namespace {

// LDTILECFG's 64 bytes: palette 1, tiles 0-5 of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

}  // namespace

double tdpbf16ps_chains(std::int64_t iterations, float* sink) {
  const TileConfig config;
  _tile_loadconfig(&config);
  // 2^-10 in every bf16 of A and B, as the VDPBF16PS chains: 2^-15 per step and element.
  alignas(64) std::uint16_t operand[16 * 32];
  for (std::uint16_t& x : operand) x = 0x3a80;
  alignas(64) float out[16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  for (std::int64_t n = 0; n < iterations; ++n) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 5);
    _tile_dpbf16ps(2, 4, 5);
    _tile_dpbf16ps(3, 4, 5);
  }
  float total = 0;
  _tile_stored(0, out, 64);
  total += out[0];
  _tile_stored(1, out, 64);
  total += out[17];
  _tile_stored(2, out, 64);
  total += out[34];
  _tile_stored(3, out, 64);
  total += out[51];
  _tile_release();
  *sink = total;
  return 4.0 * 16 * 16 * 32 * 2 * static_cast<double>(iterations);
}

}  // namespace qkv::bench
