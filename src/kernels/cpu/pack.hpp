#pragma once

#include <algorithm>
#include <cstdint>

namespace qkv::kernels::cpu {

// src rows [n, cols] with row stride ld -> dst [cols, n_pad] (the transpose), columns n..n_pad
// zero. Used to lay K (and V) out as [D, Tk] so that a score tile is a row-major product.
template <class T>
void pack_transposed(const T* src, std::int64_t ld, std::int64_t n, std::int64_t cols,
                     std::int64_t n_pad, T* dst) {
  // Row by row: the reads run along src's rows, and the strided writes stay inside dst, which
  // a tile keeps small enough for L1 (column by column, each read would jump ld elements, a
  // page apart for K [T, 8, 128] f32).
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t c = 0; c < cols; ++c) dst[c * n_pad + j] = src[j * ld + c];
  }
  for (std::int64_t c = 0; c < cols; ++c)
    std::fill(dst + c * n_pad + n, dst + (c + 1) * n_pad, T(0));
}

// One head's rows [0, n) (row stride ld, cols wide) cut into tiles of `tile` rows, each tile
// stored contiguously so that a kernel walking it never strides across pages or cache sets:
//   pack_tiles_transposed: tile t at dst + t * cols * tile is [cols, tile] (K^T tiles);
//   pack_tiles:            tile t at dst + t * tile * cols is [tile, cols] (V tiles).
// Rows past n are zero.
template <class T>
void pack_tiles_transposed(const T* src, std::int64_t ld, std::int64_t n, std::int64_t cols,
                           std::int64_t tile, T* dst) {
  for (std::int64_t t0 = 0; t0 < n; t0 += tile) {
    pack_transposed(src + t0 * ld, ld, std::min(tile, n - t0), cols, tile, dst);
    dst += cols * tile;
  }
}

template <class T>
void pack_tiles(const T* src, std::int64_t ld, std::int64_t n, std::int64_t cols, std::int64_t tile,
                T* dst) {
  const std::int64_t padded = (n + tile - 1) / tile * tile;
  for (std::int64_t j = 0; j < padded; ++j) {
    T* row = dst + j * cols;
    for (std::int64_t c = 0; c < cols; ++c) row[c] = j < n ? src[j * ld + c] : T(0);
  }
}

constexpr std::int64_t round_up(std::int64_t x, std::int64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

}  // namespace qkv::kernels::cpu
