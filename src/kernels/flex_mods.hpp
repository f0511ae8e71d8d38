#pragma once

// flex_attention's mods as the kernels see them: calls through the function pointers that
// create_block_mask and flex_attention instantiated in the caller's code, one per row of a tile
// (elementwise only on rare paths: non-finite values in partial tiles, the reference).

#include <cstdint>
#include <type_traits>

#include "kernels/flash_params.hpp"
#include "qkv/block_mask.hpp"
#include "qkv/dual.hpp"
#include "qkv/flex.hpp"

namespace qkv::kernels {

struct FlexMask {
  const detail::ErasedMask* erased = nullptr;

  bool operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return erased->keep(erased->mod.get(), b, h, i, j);
  }
  // masks::key_hull of the mod (erased->hull must be set).
  KeyRange hull(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                std::int64_t j1) const {
    return erased->hull(erased->mod.get(), b, h, i, j0, j1);
  }
  template <class T>
  void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                T value, T* x) const {
    if constexpr (std::is_same_v<T, float>) {
      erased->drop_row_f32(erased->mod.get(), b, h, i, j0, cols, value, x);
    } else {
      erased->drop_row_f64(erased->mod.get(), b, h, i, j0, cols, value, x);
    }
  }
};

// erased null: no score mod (s' = s, no slope to apply).
template <class T>
struct FlexScore {
  const detail::ErasedScore* erased = nullptr;

  bool has_slope() const noexcept { return erased != nullptr; }
  bool renormalizes() const noexcept { return false; }
  void apply_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                 T* s, T* grad) const {
    if (erased == nullptr) return;
    if constexpr (std::is_same_v<T, float>) {
      erased->row_f32(erased->mod.get(), b, h, i, j0, cols, s, grad);
    } else {
      erased->row_f64(erased->mod.get(), b, h, i, j0, cols, s, grad);
    }
  }
  void captured_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                    std::int64_t cols, const T* s, const T* ds,
                    const detail::CaptureSink<T>& sink) const {
    if (erased == nullptr || erased->captured_f32 == nullptr) return;  // a mod that captures none
    if constexpr (std::is_same_v<T, float>) {
      erased->captured_f32(erased->mod.get(), b, h, i, j0, cols, s, ds, sink);
    } else {
      erased->captured_f64(erased->mod.get(), b, h, i, j0, cols, s, ds, sink);
    }
  }
  T operator()(T s, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    apply_row(b, h, i, j, 1, &s, nullptr);
    return s;
  }
  Dual<T> operator()(Dual<T> s, std::int64_t b, std::int64_t h, std::int64_t i,
                     std::int64_t j) const {
    if (erased == nullptr) return s;
    T value = s.v, slope = 0;
    apply_row(b, h, i, j, 1, &value, &slope);
    return {value, s.d * slope};
  }
};

// The captured pass of a score mod's row (flex's mods; the built-in options capture nothing):
// sink += ds times the derivative of s' = mod(s) by each captured element read at s [cols].
template <class M, class T>
void captured_row(const M& mod, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                  std::int64_t cols, const T* s, const T* ds, const detail::CaptureSink<T>& sink) {
  if constexpr (requires { mod.captured_row(b, h, i, j0, cols, s, ds, sink); }) {
    mod.captured_row(b, h, i, j0, cols, s, ds, sink);
  }
}

template <class T>
using FlexFwdParams = FwdParams<T, FlexScore<T>, FlexMask>;
template <class T>
using FlexBwdParams = BwdParams<T, FlexScore<T>, FlexMask>;

}  // namespace qkv::kernels
