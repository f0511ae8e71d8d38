// The fused forward: tiled online softmax. For each (b, h, q-block) the score tile S = (scale Q)
// K^T of one k-block at a time is turned into probabilities against a running row max, the output
// accumulator is rescaled when the max moves, and one division at the end normalizes it. The
// Tq x Tk matrix never exists; lse is saved for the backward. The state is softmax_state-inl.h's;
// problems of a few queries (decode) go to flash_decode.cpp instead.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/flash_fwd.cpp"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/block_view.hpp"
#include "kernels/cpu/decode.hpp"
#include "kernels/cpu/entry.hpp"
#include "kernels/cpu/gemm-inl.h"
#include "kernels/cpu/key_tiles-inl.h"
#include "kernels/cpu/large_buffer.hpp"
#include "kernels/cpu/softmax_state-inl.h"
#include "kernels/cpu/tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

constexpr std::int64_t kBq = TileTraits::kForwardBlockQ;  // the most rows of a q-block

// acc [live, Dv] += P V over the pairs the mask keeps only, for rows [i0, i0 + live) of head h
// and keys [j0, j0 + cols) of batch b, with P [live, kBk] and this tile of V [kBk, Dv]. For
// partial tiles whose V holds an inf or NaN: the product would add 0 * NaN = NaN into the rows
// that drop the key.
template <class T, class ScoreMod, class MaskMod>
void values_kept(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t h,
                 std::int64_t i0, std::int64_t live, std::int64_t j0, std::int64_t cols, const T* P,
                 const T* v, T* acc) {
  const std::int64_t dim_v = p.dims.Dv;
  for (std::int64_t r = 0; r < live; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      if (p.mask_mod(b, h, i0 + r, j0 + c))
        axpy(P[r * kBk + c], v + c * dim_v, acc + r * dim_v, dim_v);
    }
  }
}

// Folds every key into `state`, the online-softmax state of rows [i0, i0 + live) of head h of
// batch b, from the tiles of its k/v head in `keys`. Tiles the mask empties are skipped (and never
// packed).
template <class T, class ScoreMod, class MaskMod>
void attend_keys(const FwdParams<T, ScoreMod, MaskMod>& p, KeyTiles<T>& keys, std::int64_t b,
                 std::int64_t h, std::int64_t i0, std::int64_t live, ForwardScratch<T>& scratch,
                 const SoftmaxState<T>& state) {
  const Dims& d = p.dims;
  if (live == 0) return;
  T* q = scratch.q.get();  // scale * Q of these rows, [live, D]
  scale_rows(p.q.at(b, i0, h), p.q.row, live, d.D, p.scale, q);
  // The block mask's q-blocks in these rows (a forward block is one or two of them), and the
  // k-blocks any of them needs.
  const BlockView blocks(p.blocks);
  const std::int64_t qb0 = i0 / TileTraits::kBlockQ;
  const std::int64_t halves = std::max<std::int64_t>(
      1, (std::max<std::int64_t>(live, 1) + TileTraits::kBlockQ - 1) / TileTraits::kBlockQ);
  KeyRange span{blocks.k_span(b, h, qb0)};
  for (std::int64_t x = 1; x < halves; ++x) {
    const KeyRange more = blocks.k_span(b, h, qb0 + x);
    if (more.empty()) continue;
    span = span.empty() ? more : KeyRange{std::min(span.lo, more.lo), std::max(span.hi, more.hi)};
  }
  TileKind kinds[kBq / TileTraits::kBlockQ];
  const std::int64_t head_kv = b * d.Hk + h / d.group();
  for (std::int64_t kb = span.lo; kb < span.hi; ++kb) {
    const std::int64_t j0 = kb * kBk;
    const std::int64_t cols = std::min(kBk, d.Tk - j0);
    bool any = false, all_full = true;
    for (std::int64_t x = 0; x < halves; ++x) {
      kinds[x] = blocks.kind(b, h, qb0 + x, kb);
      any = any || kinds[x] != TileKind::empty;
      all_full = all_full && kinds[x] == TileKind::full;
    }
    if (!any) continue;
    keys.ensure(head_kv, kb);
    T* s = scratch.s.get();
    // S = (scale Q) K^T for this tile (the pack's zero padding fills columns past Tk).
    gemm<true>(live, kBk, d.D, q, d.D, keys.kt(head_kv, kb), kBk, s, kBk, false);
    softmax_tile(p, b, h, i0, live, j0, cols, kinds, s, scratch.z.get(), state);
    const T* vt = keys.vt(head_kv, kb);
    if (!all_full && !keys.v_finite(head_kv, kb)) {
      values_kept(p, b, h, i0, live, j0, cols, s, vt, state.acc);
    } else {
      gemm(live, d.Dv, cols, s, kBk, vt, d.Dv, state.acc, d.Dv, true);  // acc += P V
    }
  }
}

// Prefill and training shapes: K^T and V packed once per call (KeyTiles), work split over
// (b, h, q-block).
template <class T, class ScoreMod, class MaskMod>
void forward_tiled(const FwdParams<T, ScoreMod, MaskMod>& p) {
  const Dims& d = p.dims;
  KeyTiles<T> keys(d, p.k, p.v, p.half_kv);
  // A sparse mask (most tiles empty) keeps 64-row blocks: a 128-row block computes the union of
  // its two halves' tiles, and its K and V tiles fit the cache anyway (qkv bench --variants, T =
  // 8192, fwd, AMD EPYC Zen 3: bigbird's time over full x kept tiles was 2.06 with 128 rows).
  const bool sparse = 2 * p.blocks->counts[static_cast<int>(TileKind::empty)] >
                      static_cast<std::int64_t>(p.blocks->kinds.size());
  const std::int64_t block =
      sparse
          ? TileTraits::kBlockQ
          : TileTraits::forward_block_q(d.Tk * (d.D + d.Dv) * static_cast<std::int64_t>(sizeof(T)));
  const std::int64_t q_blocks = (d.Tq + block - 1) / block;
  const std::int64_t items = d.B * d.Hq * q_blocks;
#pragma omp parallel
  {
    ForwardScratch<T> scratch(block, d.D, d.Dv);
    const SoftmaxState<T> state = scratch.state();
    // Dynamic scheduling, last q-blocks first: under a causal mask they are the heaviest, so the
    // light ones fill in at the end.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t i0 = (q_blocks - 1 - item % q_blocks) * block;
      const std::int64_t bh = item / q_blocks;
      const std::int64_t b = bh / d.Hq;
      const std::int64_t h = bh % d.Hq;
      const std::int64_t rows = std::min(block, d.Tq - i0);
      const std::int64_t live = live_rows(p, b, i0, rows);
      state.reset(rows, d.Dv);
      attend_keys(p, keys, b, h, i0, live, scratch, state);
      write_rows(p, b, h, i0, rows, live, state);
    }
  }
}

void ExpSoftmaxF32(const float* x, float* y, std::int64_t n) {
  const hn::ScalableTag<float> d;
  const auto L = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(exp_softmax(d, hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) {
    const hn::CappedTag<float, 1> d1;
    hn::StoreU(exp_softmax(d1, hn::LoadU(d1, x + i)), d1, y + i);
  }
}

void SoftCapF32(float cap, float* s, float* grad, std::int64_t n) { soft_cap_n(cap, s, grad, n); }
void SoftCapF64(double cap, double* s, double* grad, std::int64_t n) {
  soft_cap_n(cap, s, grad, n);
}

void ForwardF32(const FwdParams<float>& p) { forward_tiled(p); }
void ForwardF64(const FwdParams<double>& p) { forward_tiled(p); }
void FlexForwardF32(const FlexFwdParams<float>& p) { forward_tiled(p); }
void FlexForwardF64(const FlexFwdParams<double>& p) { forward_tiled(p); }

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(ExpSoftmaxF32);
HWY_EXPORT(SoftCapF32);
HWY_EXPORT(SoftCapF64);
HWY_EXPORT(ForwardF32);
HWY_EXPORT(ForwardF64);
HWY_EXPORT(FlexForwardF32);
HWY_EXPORT(FlexForwardF64);

void exp_softmax(const float* x, float* y, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(ExpSoftmaxF32)(x, y, n);
}

void soft_cap(float cap, float* s, float* grad, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(SoftCapF32)(cap, s, grad, n);
}
void soft_cap(double cap, double* s, double* grad, std::int64_t n) {
  HWY_DYNAMIC_DISPATCH(SoftCapF64)(cap, s, grad, n);
}

template <>
void forward(const FwdParams<float>& params) {
  if (params.dims.Tq <= TileTraits::kDecodeMaxQueries) return decode(params);
  HWY_DYNAMIC_DISPATCH(ForwardF32)(params);
}

template <>
void forward(const FwdParams<double>& params) {
  if (params.dims.Tq <= TileTraits::kDecodeMaxQueries) return decode(params);
  HWY_DYNAMIC_DISPATCH(ForwardF64)(params);
}

template <>
void forward(const FlexFwdParams<float>& params) {
  if (params.dims.Tq <= TileTraits::kDecodeMaxQueries) return decode(params);
  HWY_DYNAMIC_DISPATCH(FlexForwardF32)(params);
}

template <>
void forward(const FlexFwdParams<double>& params) {
  if (params.dims.Tq <= TileTraits::kDecodeMaxQueries) return decode(params);
  HWY_DYNAMIC_DISPATCH(FlexForwardF64)(params);
}

}  // namespace qkv::kernels::cpu
#endif
