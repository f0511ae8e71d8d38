#pragma once

// One call's K and V of every (b, k/v head) in tiles of kBlockK keys, in the pairs the bf16
// matrix paths read (bf16_gemm.hpp), each tile packed by the first thread that reads it
// (pack_once.hpp): K as B of S = Q K^T, [D32 / 2][kBlockK][2] (D32: D rounded up to 32), and V
// as B of P V, [kBlockK / 2][Dv16][2] (Dv16: Dv rounded up to 16), zero past Tk, D and Dv. The
// bf16 bits are copied as they lie: no rounding.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/bf16_pack.hpp"
#include "kernels/cpu/large_buffer.hpp"
#include "kernels/cpu/pack_once.hpp"
#include "kernels/cpu/tile_traits.hpp"
#include "kernels/params.hpp"
#include "qkv/half.hpp"

namespace qkv::kernels::cpu {

class PairTiles {
 public:
  static constexpr std::int64_t kKeys = TileTraits::kBlockK;
  static_assert(kKeys % kUnitDepth == 0 && kKeys % kUnitCols == 0, "whole tiles of keys");

  // k [B, Tk, Hk, D], v [B, Tk, Hk, Dv], both bf16 bits.
  PairTiles(const Dims& d, Rows<const std::uint16_t> k, Rows<const std::uint16_t> v)
      : k_(k),
        v_(v),
        tk_(d.Tk),
        dim_(d.D),
        dim_v_(d.Dv),
        depth_(round_up(std::max<std::int64_t>(d.D, 1), kUnitDepth)),
        cols_v_(round_up(std::max<std::int64_t>(d.Dv, 1), kUnitCols)),
        heads_(d.Hk),
        tiles_(round_up(std::max<std::int64_t>(d.Tk, 1), kKeys) / kKeys),
        kp_(allocate_large<std::uint16_t>(
            static_cast<size_t>(d.B * heads_ * tiles_ * kKeys * depth_))),
        vp_(allocate_large<std::uint16_t>(
            static_cast<size_t>(d.B * heads_ * tiles_ * kKeys * cols_v_))),
        v_finite_(static_cast<size_t>(d.B * heads_ * tiles_)),
        once_(d.B * heads_ * tiles_) {}

  std::int64_t depth() const { return depth_; }    // D rounded up to 32
  std::int64_t cols_v() const { return cols_v_; }  // Dv rounded up to 16

  // Packs tile kb of k/v head bh = b * Hk + hk unless it is; before the accessors below. While
  // another thread packs it, packs tile `ahead` of the head (>= 0: the one the caller reads next)
  // if no thread has started that one.
  void ensure(std::int64_t bh, std::int64_t kb, std::int64_t ahead = -1) {
    once_.ensure(bh * tiles_ + kb, ahead >= 0 ? bh * tiles_ + ahead : -1,
                 [&](std::int64_t tile) { pack(bh, tile - bh * tiles_); });
  }
  const std::uint16_t* kp(std::int64_t bh, std::int64_t kb) const {
    return kp_.get() + offset(bh, kb) * depth_;
  }
  const std::uint16_t* vp(std::int64_t bh, std::int64_t kb) const {
    return vp_.get() + offset(bh, kb) * cols_v_;
  }
  bool v_finite(std::int64_t bh, std::int64_t kb) const {
    return v_finite_[static_cast<size_t>(bh * tiles_ + kb)] != 0;
  }
  // Element (key c, column x) of V tile kb of head bh, from its pairs.
  float v_at(std::int64_t bh, std::int64_t kb, std::int64_t c, std::int64_t x) const {
    return bf16_bits_to_f32(vp(bh, kb)[((c / 2) * cols_v_ + x) * 2 + c % 2]);
  }

 private:
  void pack(std::int64_t bh, std::int64_t kb) {
    const std::int64_t b = bh / heads_, hk = bh % heads_, j0 = kb * kKeys;
    const std::int64_t n = std::min(kKeys, tk_ - j0);
    pack_pairs_transposed(k_.at(b, j0, hk), k_.row, dim_, n, depth_, kKeys,
                          kp_.get() + offset(bh, kb) * depth_);
    const bool finite = pack_pairs_rows(v_.at(b, j0, hk), v_.row, n, dim_v_, kKeys, cols_v_,
                                        vp_.get() + offset(bh, kb) * cols_v_);
    v_finite_[static_cast<size_t>(bh * tiles_ + kb)] = finite ? 1 : 0;
  }
  std::int64_t offset(std::int64_t bh, std::int64_t kb) const { return (bh * tiles_ + kb) * kKeys; }

  Rows<const std::uint16_t> k_, v_;
  std::int64_t tk_, dim_, dim_v_, depth_, cols_v_, heads_, tiles_;
  LargeBuffer<std::uint16_t> kp_, vp_;
  std::vector<std::uint8_t> v_finite_;
  PackOnce once_;
};

}  // namespace qkv::kernels::cpu
