// The attention weights P [B, Hq, Tq, Tk] from the fused machinery, for inspection (heatmaps,
// need_weights): per (b, h, q-block), one pass over the block mask's k-blocks folds the score
// tiles into the online-softmax state (softmax_state-inl.h) for each row's max m and sum l, and a
// second recomputes them and writes P = exp(s - m) / l straight into the output, 0 where the mask
// drops and in the tiles it empties. No Tq x Tk score buffer exists beside the output, and V is
// never read.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/flash_weights.cpp"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/block_view.hpp"
#include "kernels/cpu/gemm-inl.h"
#include "kernels/cpu/key_tiles-inl.h"
#include "kernels/cpu/softmax_state-inl.h"
#include "kernels/cpu/tile-inl.h"
#include "kernels/cpu/weights.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

constexpr std::int64_t kRows = TileTraits::kBlockQ;

// Rows [i0, i0 + rows) of head h of batch b, against its k/v head's K^T tiles in keys.
template <class T, class ScoreMod, class MaskMod>
void weights_rows(const FwdParams<T, ScoreMod, MaskMod>& p, KeyTiles<T>& keys, std::int64_t b,
                  std::int64_t h, std::int64_t i0, std::int64_t rows, const WeightsOut<T>& w,
                  ForwardScratch<T>& scratch) {
  const Dims& d = p.dims;
  const std::int64_t live = live_rows(p, b, i0, rows);
  const BlockView blocks(p.blocks);
  const std::int64_t qb = i0 / TileTraits::kBlockQ;
  const KeyRange span = live > 0 ? blocks.k_span(b, h, qb) : KeyRange{0, 0};
  T* q = scratch.q.get();
  T* s = scratch.s.get();
  if (live > 0) scale_rows(p.q.at(b, i0, h), p.q.row, live, d.D, p.scale, q);
  // Pass 1: each row's max and sum over the kept keys (dim_v 0: no accumulator).
  const SoftmaxState<T> state = scratch.state();
  state.reset(rows, 0);
  const std::int64_t head_kv = b * d.Hk + h / d.group();
  const auto scores = [&](std::int64_t kb, TileKind kind) {
    const std::int64_t j0 = kb * kBk;
    keys.ensure(head_kv, kb);
    gemm<true>(live, kBk, d.D, q, d.D, keys.kt(head_kv, kb), kBk, s, kBk, false);
    score_tile(p, b, h, i0, live, j0, std::min(kBk, d.Tk - j0), &kind, s, static_cast<T*>(nullptr));
  };
  for (std::int64_t kb = span.lo; kb < span.hi; ++kb) {
    const TileKind kind = blocks.kind(b, h, qb, kb);
    if (kind == TileKind::empty) continue;
    scores(kb, kind);
    state.absorb(s, live, 0);
  }
  // Pass 2: P = exp(s - m) / l where the mask keeps; a row that met a NaN score (l NaN) is NaN
  // there; rows that kept nothing, dropped rows, and the tiles the mask empties are 0.
  for (std::int64_t kb = 0; kb * kBk < d.Tk; ++kb) {
    const std::int64_t j0 = kb * kBk;
    const std::int64_t cols = std::min(kBk, d.Tk - j0);
    const TileKind kind =
        kb >= span.lo && kb < span.hi ? blocks.kind(b, h, qb, kb) : TileKind::empty;
    if (kind != TileKind::empty) scores(kb, kind);
    for (std::int64_t r = 0; r < rows; ++r) {
      T* row = s + r * kBk;
      const bool zero = kind == TileKind::empty || r >= live || state.l[r] == T(0);
      if (!zero && std::isnan(state.l[r])) {  // as the reference: NaN wherever the mask keeps
        std::fill(row, row + kBk, std::numeric_limits<T>::quiet_NaN());
        if (kind == TileKind::partial) mask_row(p.mask_mod, b, h, i0 + r, j0, cols, T(0), row);
      } else if (!zero) {
        row_exp(row, state.m[r]);
        scale_row(row, cols, T(1) / state.l[r]);
      }
      for (std::int64_t c = 0; c < cols; ++c) w(b, h, i0 + r, j0 + c) = zero ? T(0) : row[c];
    }
  }
}

template <class T, class ScoreMod, class MaskMod>
void weights_impl(const FwdParams<T, ScoreMod, MaskMod>& p, const WeightsOut<T>& w) {
  const Dims& d = p.dims;
  KeyTiles<T> keys(d, p.k, Rows<const T>{});  // K^T only
  const std::int64_t q_blocks = (d.Tq + kRows - 1) / kRows;
#pragma omp parallel
  {
    ForwardScratch<T> scratch(kRows, d.D, 0);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < d.B * d.Hq * q_blocks; ++item) {
      const std::int64_t i0 = item % q_blocks * kRows;
      const std::int64_t h = item / q_blocks % d.Hq;
      const std::int64_t b = item / q_blocks / d.Hq;
      weights_rows(p, keys, b, h, i0, std::min(kRows, d.Tq - i0), w, scratch);
    }
  }
}

void WeightsF32(const FwdParams<float>& p, const WeightsOut<float>& w) { weights_impl(p, w); }
void WeightsF64(const FwdParams<double>& p, const WeightsOut<double>& w) { weights_impl(p, w); }
void FlexWeightsF32(const FlexFwdParams<float>& p, const WeightsOut<float>& w) {
  weights_impl(p, w);
}
void FlexWeightsF64(const FlexFwdParams<double>& p, const WeightsOut<double>& w) {
  weights_impl(p, w);
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(WeightsF32);
HWY_EXPORT(WeightsF64);
HWY_EXPORT(FlexWeightsF32);
HWY_EXPORT(FlexWeightsF64);

template <>
void weights(const FwdParams<float>& params, const WeightsOut<float>& w) {
  HWY_DYNAMIC_DISPATCH(WeightsF32)(params, w);
}

template <>
void weights(const FwdParams<double>& params, const WeightsOut<double>& w) {
  HWY_DYNAMIC_DISPATCH(WeightsF64)(params, w);
}

template <>
void weights(const FlexFwdParams<float>& params, const WeightsOut<float>& w) {
  HWY_DYNAMIC_DISPATCH(FlexWeightsF32)(params, w);
}

template <>
void weights(const FlexFwdParams<double>& params, const WeightsOut<double>& w) {
  HWY_DYNAMIC_DISPATCH(FlexWeightsF64)(params, w);
}

}  // namespace qkv::kernels::cpu
#endif
