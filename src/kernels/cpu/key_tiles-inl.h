// One call's K^T (and V) of every (b, k/v head) in tiles of kBk keys, shared by all q-blocks and
// all query heads of the group, each tile packed by the first thread that reads it
// (pack_once.hpp). Used by the forward and the attention weights. Per-target include guard.
#if defined(QKV_KERNELS_CPU_KEY_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_CPU_KEY_TILES_INL_H_
#undef QKV_KERNELS_CPU_KEY_TILES_INL_H_
#else
#define QKV_KERNELS_CPU_KEY_TILES_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "hwy/highway.h"
#include "kernels/cpu/large_buffer.hpp"
#include "kernels/cpu/pack-inl.h"
#include "kernels/cpu/pack_once.hpp"
#include "kernels/cpu/tile-inl.h"
#include "kernels/cpu/tile_traits.hpp"
#include "kernels/flash_params.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

// k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] (v.data null: keys only), or both in bf16 or f16 (half, T
// = float: a KV cache read as it lies) -> per (b * Hk + hk) and k-block kb: kt [D, kBk], vt [kBk,
// Dv] (keys past Tk zero, or V's own rows, see vt()), and whether that V tile is all finite. The
// 16-bit values convert exactly, so the tiles hold the bits of a cache converted first.
template <class T>
class KeyTiles {
 public:
  KeyTiles(const Dims& d, Rows<const T> k, Rows<const T> v, const HalfKv& half = {})
      : k_(k),
        v_(v),
        half_(half),
        tk_(d.Tk),
        dim_(d.D),
        dim_v_(v.data != nullptr || half.v.data != nullptr ? d.Dv : 0),
        heads_(d.Hk),
        tiles_(round_up(std::max<std::int64_t>(d.Tk, 1), kBk) / kBk),
        kt_(allocate_large<T>(static_cast<size_t>(d.B * heads_ * tiles_ * kBk * dim_))),
        v_in_place_(half.kind == HalfKind::none && v.data != nullptr && v.row == d.Dv),
        vt_(allocate_large<T>(
            static_cast<size_t>(v_in_place_ ? 0 : d.B * heads_ * tiles_ * kBk * dim_v_))),
        v_finite_(static_cast<size_t>(d.B * heads_ * tiles_)),
        once_(d.B * heads_ * tiles_) {}

  // Packs tile kb of k/v head bh = b * Hk + hk unless it is; before the accessors below. While
  // another thread packs it, packs tile `ahead` of the head (>= 0: the one the caller reads next)
  // if no thread has started that one.
  void ensure(std::int64_t bh, std::int64_t kb, std::int64_t ahead = -1) {
    once_.ensure(bh * tiles_ + kb, ahead >= 0 ? bh * tiles_ + ahead : -1,
                 [&](std::int64_t tile) { pack(bh, tile - bh * tiles_); });
  }
  const T* kt(std::int64_t bh, std::int64_t kb) const { return at(kt_.get(), dim_, bh, kb); }
  // V's rows [kb kBk, kb kBk + kBk) (the valid ones of a last partial tile: the products read
  // no further), [rows, Dv]: where V's rows lie one after another (a heads-first view, a single
  // head) they are read where they lie; the copy cost a sliding window's forward 4.8% (perf, T =
  // 8192, heads-first, Intel Xeon VM, 2026-11-27) and a dense pattern gains nothing from it.
  const T* vt(std::int64_t bh, std::int64_t kb) const {
    if (v_in_place_) return v_.at(bh / heads_, kb * kBk, bh % heads_);
    return at(vt_.get(), dim_v_, bh, kb);
  }
  bool v_finite(std::int64_t bh, std::int64_t kb) const {
    return v_finite_[static_cast<size_t>(bh * tiles_ + kb)] != 0;
  }

 private:
  void pack(std::int64_t bh, std::int64_t kb) {
    const std::int64_t b = bh / heads_, hk = bh % heads_, j0 = kb * kBk;
    const std::int64_t n = std::min(kBk, tk_ - j0);
    T* vt = dim_v_ != 0 && !v_in_place_ ? at(vt_.get(), dim_v_, bh, kb) : nullptr;
    if (!pack_half(b, j0, hk, n, bh, kb, vt)) {
      pack_transposed(k_.at(b, j0, hk), k_.row, n, dim_, kBk, at(kt_.get(), dim_, bh, kb));
      if (vt != nullptr) pack_rows(v_.at(b, j0, hk), v_.row, n, dim_v_, kBk, vt);
    }
    if (dim_v_ != 0) {
      v_finite_[static_cast<size_t>(bh * tiles_ + kb)] =
          v_in_place_ ? all_finite(v_.at(b, j0, hk), n * dim_v_) : all_finite(vt, kBk * dim_v_);
    }
  }

  // Packs the tile from the 16-bit cache where there is one (T = float); false otherwise. K's n
  // rows are converted into a scratch [n, D] of this thread, then transposed as an f32 K is; V's
  // are converted straight into vt (null: keys only).
  bool pack_half(std::int64_t b, std::int64_t j0, std::int64_t hk, std::int64_t n, std::int64_t bh,
                 std::int64_t kb, T* vt) {
    if constexpr (std::is_same_v<T, float>) {
      return visit_half(half_, [&](const auto& k, const auto& v) {
        thread_local std::vector<T> rows;
        rows.resize(static_cast<size_t>(n * dim_));
        convert_rows(k.at(b, j0, hk), k.row, n, dim_, rows.data(), dim_);
        pack_transposed(rows.data(), dim_, n, dim_, kBk, at(kt_.get(), dim_, bh, kb));
        if (vt != nullptr) pack_rows(v.at(b, j0, hk), v.row, n, dim_v_, kBk, vt);
      });
    }
    return false;
  }

  T* at(T* base, std::int64_t dim, std::int64_t bh, std::int64_t kb) const {
    return base + (bh * tiles_ + kb) * kBk * dim;
  }
  Rows<const T> k_, v_;
  HalfKv half_;
  std::int64_t tk_, dim_, dim_v_, heads_, tiles_;
  LargeBuffer<T> kt_;
  bool v_in_place_;
  LargeBuffer<T> vt_;
  std::vector<std::uint8_t> v_finite_;
  PackOnce once_;
};

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_CPU_KEY_TILES_INL_H_
