// The fused forward: tiled online softmax. For each (b, h, q-block) the score tile S = Q K^T of
// one k-block at a time is turned into probabilities against a running row max, the output
// accumulator is rescaled when the max moves, and one division at the end normalizes it. The
// Tq x Tk matrix never exists; lse is saved for the backward.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/flash_fwd.cpp"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/entry.hpp"
#include "kernels/cpu/gemm-inl.h"
#include "kernels/cpu/pack.hpp"
#include "kernels/cpu/tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

constexpr std::int64_t kBq = TileTraits::kBlockQ;

// Per-thread scratch of the forward.
template <class T>
struct ForwardScratch {
  hwy::AlignedFreeUniquePtr<T[]> s, z, acc, m, l;
  ForwardScratch(std::int64_t dv)
      : s(hwy::AllocateAligned<T>(kBq * kBk)),
        z(hwy::AllocateAligned<T>(kBq * kBk)),
        acc(hwy::AllocateAligned<T>(kBq * dv)),
        m(hwy::AllocateAligned<T>(kBq)),
        l(hwy::AllocateAligned<T>(kBq)) {}
};

// Rows [i0, i0 + kBq) of head h of batch b. kt is K^T of this (b, k/v head): [D, tk_pad].
template <class T>
void forward_block(const Problem<T>& p, const T* kt, std::int64_t tk_pad, std::int64_t b,
                   std::int64_t h, std::int64_t i0, ForwardScratch<T>& scratch, T* out, T* lse) {
  const Dims& d = p.dims;
  const std::int64_t hk = h / d.group();
  const std::int64_t rows = std::min(kBq, d.Tq - i0);
  // Rows at or past this batch's query length are dropped whole: out 0, lse -inf.
  const std::int64_t live = std::clamp<std::int64_t>(p.mask_mod.lengths.tq(b) - i0, 0, rows);
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T* acc = scratch.acc.get();
  T* m = scratch.m.get();
  T* l = scratch.l.get();
  std::fill(acc, acc + rows * d.Dv, T(0));
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, T(0));
  const T* q = p.q + ((b * d.Tq + i0) * d.Hq + h) * d.D;  // rows stride Hq * D
  const Range keys = key_range(p.mask_mod, b, i0, i0 + live);
  for (std::int64_t j0 = keys.lo / kBk * kBk; j0 < keys.hi; j0 += kBk) {
    const std::int64_t cols = std::min(kBk, d.Tk - j0);
    const TileKind kind = classify(p.mask_mod, b, i0, i0 + live, j0, j0 + cols);
    if (kind == TileKind::empty) continue;
    T* s = scratch.s.get();
    // S = Q K^T for this tile, then scale, mods and mask.
    gemm<true>(live, kBk, d.D, q, d.Hq * d.D, kt + j0, tk_pad, s, kBk, false);
    score_tile(p, b, h, i0, live, j0, cols, kind, s, static_cast<T*>(nullptr));
    if (p.dropout.enabled()) dropout_tile(p, b, h, i0, live, j0, cols, scratch.z.get());
    for (std::int64_t r = 0; r < live; ++r) {
      T* row = s + r * kBk;
      const T m_new = std::max(m[r], row_max(row));
      if (m_new == kNegInf) {  // nothing kept in this row yet
        std::fill(row, row + kBk, T(0));
        continue;
      }
      // Online softmax: rescale what was accumulated against the old max.
      const T alpha = m[r] == kNegInf ? T(0) : std::exp(m[r] - m_new);
      const T row_sum = row_exp(row, m_new);
      l[r] = l[r] * alpha + row_sum;
      m[r] = m_new;
      if (alpha != T(1)) scale_row(acc + r * d.Dv, d.Dv, alpha);
      // Dropout scales what reaches V, not the normalizer (lse is not affected).
      if (p.dropout.enabled()) row_mul(row, scratch.z.get() + r * kBk);
    }
    // acc += P V for this tile; V rows of this head have stride Hk * Dv.
    gemm(live, d.Dv, cols, s, kBk, p.v + ((b * d.Tk + j0) * d.Hk + hk) * d.Dv, d.Hk * d.Dv, acc,
         d.Dv, true);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    T* o = out + ((b * d.Tq + i0 + r) * d.Hq + h) * d.Dv;
    const bool empty = r >= live || l[r] == T(0);
    const T inv = empty ? T(0) : T(1) / l[r];
    for (std::int64_t c = 0; c < d.Dv; ++c) o[c] = empty ? T(0) : acc[r * d.Dv + c] * inv;
    lse[(b * d.Hq + h) * d.Tq + i0 + r] = empty ? kNegInf : m[r] + std::log(l[r]);
  }
}

template <class T>
void forward_impl(const Problem<T>& p, T* out, T* lse) {
  const Dims& d = p.dims;
  const std::int64_t tk_pad = round_up(std::max<std::int64_t>(d.Tk, 1), kBk);
  // K^T of every (b, k/v head), packed once and shared by all q-blocks and all query heads of
  // the group: [B * Hk][D][tk_pad].
  auto kt = hwy::AllocateAligned<T>(static_cast<size_t>(d.B * d.Hk * d.D * tk_pad));
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < d.B * d.Hk; ++bh) {
    const std::int64_t b = bh / d.Hk;
    const std::int64_t hk = bh % d.Hk;
    pack_transposed(p.k + (b * d.Tk * d.Hk + hk) * d.D, d.Hk * d.D, d.Tk, d.D, tk_pad,
                    kt.get() + bh * d.D * tk_pad);
  }
  const std::int64_t q_blocks = (d.Tq + kBq - 1) / kBq;
  const std::int64_t items = d.B * d.Hq * q_blocks;
#pragma omp parallel
  {
    ForwardScratch<T> scratch(d.Dv);
    // Dynamic scheduling, last q-blocks first: under a causal mask they are the heaviest, so the
    // light ones fill in at the end.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t qb = q_blocks - 1 - item % q_blocks;
      const std::int64_t bh = item / q_blocks;
      const std::int64_t b = bh / d.Hq;
      const std::int64_t h = bh % d.Hq;
      const T* kt_head = kt.get() + (b * d.Hk + h / d.group()) * d.D * tk_pad;
      forward_block(p, kt_head, tk_pad, b, h, qb * kBq, scratch, out, lse);
    }
  }
}

void ForwardF32(const Problem<float>& p, float* out, float* lse) { forward_impl(p, out, lse); }
void ForwardF64(const Problem<double>& p, double* out, double* lse) { forward_impl(p, out, lse); }

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(ForwardF32);
HWY_EXPORT(ForwardF64);

template <>
void forward(const Problem<float>& problem, float* out, float* lse) {
  HWY_DYNAMIC_DISPATCH(ForwardF32)(problem, out, lse);
}

template <>
void forward(const Problem<double>& problem, double* out, double* lse) {
  HWY_DYNAMIC_DISPATCH(ForwardF64)(problem, out, lse);
}

}  // namespace qkv::kernels::cpu
#endif
