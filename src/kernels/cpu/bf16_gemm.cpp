#include "kernels/cpu/bf16_gemm.hpp"

#include <atomic>

#include "kernels/cpu/amx_emulated.hpp"
#include "kernels/cpu/bf16_pack.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/exp_round_bf16.hpp"

namespace qkv::kernels::cpu {

const char* path_name(MatrixPath path) {
  switch (path) {
    case MatrixPath::amx_bf16:
      return "amx-bf16";
    case MatrixPath::avx512_bf16:
      return "avx512-bf16";
    case MatrixPath::amx_emulated:
      return "amx-emulated";
  }
  return "?";
}

bool path_available(MatrixPath path) {
  const CpuFeatures& f = cpu_features();
  switch (path) {
    case MatrixPath::amx_bf16:
      return f.amx_usable && f.amx_bf16;
    case MatrixPath::avx512_bf16:
      return f.avx512_bf16 && f.avx512bw;
    case MatrixPath::amx_emulated:
      return true;
  }
  return false;
}

bool avx512_packing() {
  static const bool on = cpu_features().avx512f && cpu_features().avx512bw;
  return on;
}

bool best_bf16_path(MatrixPath& path) {
  for (const MatrixPath p : {MatrixPath::amx_bf16, MatrixPath::avx512_bf16}) {
    if (path_available(p)) {
      path = p;
      return true;
    }
  }
  return false;
}

namespace {

// -1: the best path; -2: none; else a forced MatrixPath.
std::atomic<int> forced_path{-1};

}  // namespace

bool fused_bf16_path(std::int64_t Tk, MatrixPath& path) {
  const int forced = forced_path.load(std::memory_order_relaxed);
  if (forced == -1) {
    return best_bf16_path(path) &&
           Tk >= (path == MatrixPath::amx_bf16 ? kAmxMinKeys : kBf16MinKeys);
  }
  if (forced == -2) return false;
  path = static_cast<MatrixPath>(forced);
  return true;
}

bool decode_bf16_path(MatrixPath& path) {
  const int forced = forced_path.load(std::memory_order_relaxed);
  if (forced == -2) return false;
  const bool hardware = path_available(MatrixPath::avx512_bf16);
  if (forced == -1) {
    path = MatrixPath::avx512_bf16;
    return hardware;
  }
  path = static_cast<MatrixPath>(forced) == MatrixPath::amx_emulated || !hardware
             ? MatrixPath::amx_emulated
             : MatrixPath::avx512_bf16;
  return true;
}

void force_fused_path(std::optional<MatrixPath> path) {
  forced_path.store(path ? static_cast<int>(*path) : -2, std::memory_order_relaxed);
}

void reset_fused_path() { forced_path.store(-1, std::memory_order_relaxed); }

namespace {

std::atomic<bool> portable_rounding{false};

bool native_rounding() {
  const CpuFeatures& f = cpu_features();
  return !portable_rounding.load(std::memory_order_relaxed) && f.avx512_bf16 && f.avx512bw &&
         f.avx512vl;
}

}  // namespace

ExpRoundRow native_exp_round_row() {
  return native_rounding() ? exp_round_row_avx512bf16 : nullptr;
}
RoundRun native_round_run() { return native_rounding() ? round_run_avx512bf16 : nullptr; }
RoundPairs native_round_pairs() { return native_rounding() ? round_pairs_avx512bf16 : nullptr; }

void force_portable_rounding(bool portable) {
  portable_rounding.store(portable, std::memory_order_relaxed);
}

namespace {

// The MatrixTileScopes alive on this thread, and whether the AMX tiles hold gemm_tile_config().
thread_local int tile_scopes = 0;
thread_local bool amx_configured = false;

}  // namespace

MatrixTileScope::MatrixTileScope() { ++tile_scopes; }

MatrixTileScope::~MatrixTileScope() {
  if (--tile_scopes == 0 && amx_configured) {
    amx_release();
    amx_configured = false;
  }
}

void bf16_gemm(MatrixPath path, std::int64_t m_tiles, std::int64_t n_tiles, std::int64_t k_chunks,
               const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b, float* c,
               std::int64_t ldc, bool accumulate) {
  switch (path) {
    case MatrixPath::amx_bf16:
      if (!amx_configured) {
        amx_configure();
        amx_configured = true;
      }
      bf16_gemm_amx(m_tiles, n_tiles, k_chunks, a, lda, b, c, ldc, accumulate);
      if (tile_scopes == 0) {
        amx_release();
        amx_configured = false;
      }
      return;
    case MatrixPath::avx512_bf16:
      return bf16_gemm_avx512(m_tiles, n_tiles, k_chunks, a, lda, b, c, ldc, accumulate);
    case MatrixPath::amx_emulated: {
      EmulatedAmx unit;
      unit.load_config(gemm_tile_config());
      return amx_gemm(unit, m_tiles, n_tiles, k_chunks, a, lda, b, c, ldc, accumulate);
    }
  }
}

}  // namespace qkv::kernels::cpu
