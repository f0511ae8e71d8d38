#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

// src rows [n, cols] with row stride ld -> dst [cols, n_pad] (the transpose), columns n..n_pad
// zero. Used to lay K (and V) out as [D, Tk] so that a score tile is a row-major product.
template <class T>
void pack_transposed(const T* src, std::int64_t ld, std::int64_t n, std::int64_t cols,
                     std::int64_t n_pad, T* dst) {
  for (std::int64_t c = 0; c < cols; ++c) {
    T* row = dst + c * n_pad;
    for (std::int64_t j = 0; j < n; ++j) row[j] = src[j * ld + c];
    for (std::int64_t j = n; j < n_pad; ++j) row[j] = T(0);
  }
}

constexpr std::int64_t round_up(std::int64_t x, std::int64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

}  // namespace qkv::kernels::cpu
