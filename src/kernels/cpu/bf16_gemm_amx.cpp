// bf16_gemm.hpp's AMX path: amx_tiles.hpp's kernel on the hardware's tile instructions. Compiled
// with -mamx-tile -mamx-bf16 (CMakeLists.txt) and reached only through bf16_gemm after
// cpu_features() found the tiles usable (permission granted), which configures the tiles first.
#include <immintrin.h>

#include "kernels/cpu/amx_tiles.hpp"

namespace qkv::kernels::cpu {
namespace {

// GCC's tile intrinsics are macros that paste their tile number into the instruction, so each
// number amx_tiles.hpp uses is spelled out (C tiles 0-3, A tile 4, B tiles 5 and 6).
struct HardwareAmx {
  template <int kT>
  void zero() {
    static_assert(kT >= 0 && kT < 4, "only C tiles are zeroed");
    if constexpr (kT == 0) _tile_zero(0);
    if constexpr (kT == 1) _tile_zero(1);
    if constexpr (kT == 2) _tile_zero(2);
    if constexpr (kT == 3) _tile_zero(3);
  }
  template <int kT>
  void load(const void* base, std::int64_t stride) {
    static_assert(kT >= 0 && kT < 7, "amx_gemm's tiles");
    if constexpr (kT == 0) _tile_loadd(0, base, stride);
    if constexpr (kT == 1) _tile_loadd(1, base, stride);
    if constexpr (kT == 2) _tile_loadd(2, base, stride);
    if constexpr (kT == 3) _tile_loadd(3, base, stride);
    if constexpr (kT == 4) _tile_loadd(4, base, stride);
    if constexpr (kT == 5) _tile_loadd(5, base, stride);
    if constexpr (kT == 6) _tile_loadd(6, base, stride);
  }
  template <int kT>
  void store(void* base, std::int64_t stride) {
    static_assert(kT >= 0 && kT < 4, "only C tiles are stored");
    if constexpr (kT == 0) _tile_stored(0, base, stride);
    if constexpr (kT == 1) _tile_stored(1, base, stride);
    if constexpr (kT == 2) _tile_stored(2, base, stride);
    if constexpr (kT == 3) _tile_stored(3, base, stride);
  }
  template <int kC, int kA, int kB>
  void dpbf16ps() {
    static_assert(kC >= 0 && kC < 4 && kA == 4 && (kB == 5 || kB == 6), "amx_gemm's tiles");
    if constexpr (kC == 0 && kB == 5) _tile_dpbf16ps(0, 4, 5);
    if constexpr (kC == 0 && kB == 6) _tile_dpbf16ps(0, 4, 6);
    if constexpr (kC == 1 && kB == 5) _tile_dpbf16ps(1, 4, 5);
    if constexpr (kC == 1 && kB == 6) _tile_dpbf16ps(1, 4, 6);
    if constexpr (kC == 2 && kB == 5) _tile_dpbf16ps(2, 4, 5);
    if constexpr (kC == 2 && kB == 6) _tile_dpbf16ps(2, 4, 6);
    if constexpr (kC == 3 && kB == 5) _tile_dpbf16ps(3, 4, 5);
    if constexpr (kC == 3 && kB == 6) _tile_dpbf16ps(3, 4, 6);
  }
};

}  // namespace

// The configuration lies in static storage: from a local, g++ 12 -O3 stored only its first 17
// bytes before LDTILECFG (it does not see that the instruction reads all 64), and the tiles came
// out unconfigured (SIGILL at the first TILEZERO).
void amx_configure() {
  alignas(64) static const TileConfig config = gemm_tile_config();
  _tile_loadconfig(&config);
}

void amx_release() { _tile_release(); }

void bf16_gemm_amx(std::int64_t m_tiles, std::int64_t n_tiles, std::int64_t k_chunks,
                   const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, float* c,
                   std::int64_t ldc, bool accumulate) {
  HardwareAmx unit;
  amx_gemm(unit, m_tiles, n_tiles, k_chunks, a, lda, b, c, ldc, accumulate);
}

}  // namespace qkv::kernels::cpu
