#pragma once

// AMX's tile registers and the instructions amx_tiles.hpp uses, in scalar code, as the Intel
// architecture manual defines them (palette 1: eight tiles of at most 16 rows of 64 bytes):
// tileloadd fills a tile's configured rows and bytes and zeroes the rest, TDPBF16PS adds to each
// f32 of C the products of bf16 pairs, even element then odd, with subnormal inputs read as zero
// and subnormal results flushed to zero. The manual's sequence, not the hardware's bits: on an
// Intel Xeon VM (2026-11-27), TDPBF16PS on random tiles of 16 x 16 x 32 differed from two FMAs
// per pair in 51% of the C values, by a few units in the last place, and equalled the sum of all
// 32 products rounded once in 58%: the hardware accumulates more precisely than it documents.

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/amx_tiles.hpp"
#include "qkv/error.hpp"

namespace qkv::kernels::cpu {

class EmulatedAmx {
 public:
  void load_config(const TileConfig& config) {
    if (config.palette_id != 1) throw Error("tile config", "palette 1", "another palette");
    for (int t = 0; t < 8; ++t) {
      if (config.rows[t] > 16 || config.colsb[t] > 64 || config.colsb[t] % 4 != 0) {
        throw Error("tile config", "at most 16 rows of 64 bytes, in 4-byte columns",
                    "tile " + std::to_string(t) + " of " + std::to_string(config.rows[t]) + " x " +
                        std::to_string(config.colsb[t]));
      }
    }
    config_ = config;
    std::memset(tiles_, 0, sizeof tiles_);
  }
  template <int kT>
  void zero() {
    std::memset(tiles_[kT], 0, sizeof tiles_[kT]);
  }
  template <int kT>
  void load(const void* base, std::int64_t stride) {
    zero<kT>();
    for (int r = 0; r < config_.rows[kT]; ++r) {
      std::memcpy(tiles_[kT] + r * 64, static_cast<const unsigned char*>(base) + r * stride,
                  config_.colsb[kT]);
    }
  }
  template <int kT>
  void store(void* base, std::int64_t stride) const {
    for (int r = 0; r < config_.rows[kT]; ++r) {
      std::memcpy(static_cast<unsigned char*>(base) + r * stride, tiles_[kT] + r * 64,
                  config_.colsb[kT]);
    }
  }
  // A's and B's bf16 values are read (and flushed) once per instruction rather than once per
  // product: under AddressSanitizer the tests' emulated runs took 166 s of one bf16 backward case
  // (B1 Tq200 Tk700 D128 on an Intel Xeon VM, 2026-11-27) when every product re-read its operands.
  template <int kC, int kA, int kB>
  void dpbf16ps() {
    const int rows = config_.rows[kC], depth = config_.colsb[kA] / 4, cols = config_.colsb[kC] / 4;
    float a[16][32], b[16][32], c[16];
    for (int k = 0; k < depth; ++k) {
      for (int x = 0; x < 2 * cols; ++x) b[k][x] = bf16(kB, k, x);
    }
    for (int m = 0; m < rows; ++m) {
      for (int x = 0; x < 2 * depth; ++x) a[m][x] = bf16(kA, m, x);
    }
    for (int m = 0; m < rows; ++m) {
      for (int n = 0; n < cols; ++n) c[n] = f32(kC, m, n);
      for (int k = 0; k < depth; ++k) {
        for (int n = 0; n < cols; ++n) {
          const float acc = flush(fma(a[m][2 * k], b[k][2 * n], c[n]));
          c[n] = flush(fma(a[m][2 * k + 1], b[k][2 * n + 1], acc));
        }
      }
      std::memcpy(tiles_[kC] + m * 64, c, static_cast<size_t>(cols) * 4);
    }
  }

 private:
  float f32(int t, int row, int col) const {
    float x;
    std::memcpy(&x, tiles_[t] + row * 64 + col * 4, 4);
    return x;
  }
  float bf16(int t, int row, int index) const {
    std::uint16_t bits;
    std::memcpy(&bits, tiles_[t] + row * 64 + index * 2, 2);
    return flush(std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16));
  }
  // a * b + c rounded once, for a and b bf16 values: their product is exact in double (8 by 8
  // significant bits) and a float within range, so the double sum rounded to float is the one
  // correctly rounded float addition (53 >= 2 x 24 + 2 bits: double rounding is innocuous), and
  // outside float's range the flushes and overflows fall the same way. Equal to std::fma on 396
  // million random triples (full-range and near-cancelling c), and no library call: builds
  // without -mfma call libm's fmaf, which was 43% of an AddressSanitizer run of the bf16 backward
  // case above (88 s, Intel Xeon VM, 2026-11-27).
  static float fma(float a, float b, float c) {
    return static_cast<float>(static_cast<double>(a) * static_cast<double>(b) +
                              static_cast<double>(c));
  }
  static float flush(float x) {
    return std::fabs(x) < std::numeric_limits<float>::min() ? 0.0f * x : x;
  }

  TileConfig config_;
  alignas(64) unsigned char tiles_[8][16 * 64] = {};
};

}  // namespace qkv::kernels::cpu
