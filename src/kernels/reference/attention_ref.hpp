#pragma once

// The oracle: attention decomposed exactly as the semantics read, one (b, h) at a time, with
// the score row S and probability row P materialized. Scalar, in the compute type T (double or
// float), on the kernels' strided params (kernels/flash_params.hpp). Every fused kernel is checked
// against it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/flash_params.hpp"
#include "kernels/flex_mods.hpp"
#include "qkv/dual.hpp"
#include "qkv/philox.hpp"

namespace qkv::kernels::reference {

template <class T>
T dot(const T* a, const T* b, std::int64_t n) {
  T sum = 0;
  for (std::int64_t c = 0; c < n; ++c) sum += a[c] * b[c];
  return sum;
}

// The dropout multiplier of P[b, h, i, j]: 0 when dropped, 1 / (1 - p) when kept (drawn at
// (row0 + i, col0 + j)).
template <class T>
T dropout_scale(const Dims& d, const DropoutParams& dropout, std::int64_t b, std::int64_t h,
                std::int64_t i, std::int64_t j) {
  if (!dropout.enabled()) return T(1);
  const bool keep =
      dropout_keep(dropout.seed, dropout.offset, static_cast<std::uint32_t>(b * d.Hq + h),
                   static_cast<std::uint32_t>(dropout.row0 + i),
                   static_cast<std::uint32_t>(dropout.col0 + j), dropout.p);
  return keep ? static_cast<T>(1.0 / (1.0 - dropout.p)) : T(0);
}

// (scale a) . b for a, b [n]: each element of a scaled, then the product, as the fused kernels
// (and PyTorch, which scales q and k by sqrt(scale) each) compute a score. scale (a . b) would
// give another class of result where scale a_c underflows to 0 against an infinite b_c (0 x inf
// is NaN, tiny x inf is inf) or overflows where the product would not.
template <class T>
T scaled_dot(T scale, const T* a, const T* b, std::int64_t n) {
  T sum = 0;
  for (std::int64_t c = 0; c < n; ++c) sum += (scale * a[c]) * b[c];
  return sum;
}

// Row i of S (after score_mod) and of the keep mask, for head h of batch b.
// s, kept [Tk].
template <class T, class ScoreMod, class MaskMod>
void score_row(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t h,
               std::int64_t i, T* s, bool* kept) {
  const Dims& d = p.dims;
  const std::int64_t hk = h / d.group();
  const T* qi = p.q.at(b, i, h);
  for (std::int64_t j = 0; j < d.Tk; ++j) {
    kept[j] = p.mask_mod(b, h, i, j);
    s[j] = kept[j] ? p.score_mod(scaled_dot(p.scale, qi, p.k.at(b, j, hk), d.D), b, h, i, j) : T(0);
  }
}

// p [Tk]: row i of P from its scores s [Tk] (after score_mod), kept [Tk] and lse: exp(s_j - lse)
// over the kept keys, 0 elsewhere; with normalize, divided by its sum. The backward's dS_ij =
// P_ij (dP_ij - D_i) with D_i = dO_i . O_i assumes that the row sums to 1: off by a common factor
// 1 + e (and O_i and D_i with it), dS_ij errs by e P_ij D_i, large next to dS_ij where P_ij is
// near 1 and dP_ij near D_i. In exact arithmetic the sum is 1; in f32, lse carries the rounding
// of a number of its size, up to half an ulp of |lse| (2^-19 relative at |lse| ~ 50, where
// soft-capping at c = 50 puts it), and without the division dk's f32 error was 9x PyTorch's
// composed ops' (softcap 50, ALiBi, a window of 16, MQA). Only with soft-capping, as the fused
// backward does it (inverse_row_sums), so that both backends round alike without it: there a
// row's lse is as large only for scores as large, whose own rounding is as large. The forward
// and the backward both call this, so they use the very same P.
template <class T>
void probability_row(const T* s, const bool* kept, std::int64_t n, T lse, bool normalize, T* p) {
  T sum = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    p[j] = kept[j] ? std::exp(s[j] - lse) : T(0);
    sum += p[j];
  }
  // A sum that is not a positive finite number (a NaN row, or an lse far from the row's own, as
  // a caller may pass to the backward) is left alone, as the fused backward leaves it.
  if (!normalize || !(sum > 0 && std::isfinite(sum))) return;
  for (std::int64_t j = 0; j < n; ++j) {
    if (kept[j]) p[j] /= sum;
  }
}

// dO_i . (z v_j - o_i) = z dP_ij - D_i, the factor of dS_ij, computed as written: for a key that
// holds most of the row's weight, o_i is close to z v_j, and forming the difference before the
// dot product keeps the result accurate where z (dO_i . v_j) - dO_i . o_i would subtract two
// rounded numbers of the size of |dO_i| |v_j| (both backends: docs/numerics.md).
template <class T>
T dp_minus_delta(const T* dout, const T* v, T z, const T* o, std::int64_t n) {
  T sum = 0;
  for (std::int64_t c = 0; c < n; ++c) sum += dout[c] * (z * v[c] - o[c]);
  return sum;
}

// q, k, v -> out, lse (the shapes of kernels/flash_params.hpp); weights [B, Hq, Tq, Tk]
// (contiguous; P before dropout) when not null.
template <class T, class ScoreMod, class MaskMod>
void attention_fwd_ref(const FwdParams<T, ScoreMod, MaskMod>& p, T* weights = nullptr) {
  const Dims& d = p.dims;
  std::vector<T> s(d.Tk);
  std::vector<T> prob(d.Tk);
  std::unique_ptr<bool[]> kept(new bool[d.Tk > 0 ? d.Tk : 1]);
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t h = 0; h < d.Hq; ++h) {
      const std::int64_t hk = h / d.group();
      for (std::int64_t i = 0; i < d.Tq; ++i) {
        score_row(p, b, h, i, s.data(), kept.get());
        // Stable softmax: lse = m + log(sum_j exp(s_j - m)) over the kept keys.
        T m = -std::numeric_limits<T>::infinity();
        bool nan_score = false;
        for (std::int64_t j = 0; j < d.Tk; ++j) {
          if (kept[j] && s[j] > m) m = s[j];
          if (kept[j] && std::isnan(s[j])) nan_score = true;
        }
        T* oi = p.out.at(b, i, h);
        T* wi = weights ? weights + ((b * d.Hq + h) * d.Tq + i) * d.Tk : nullptr;
        // Every key dropped, or every kept score -inf (a -inf bias is a mask). With a NaN score
        // the row goes on: the sum below is NaN, and so are lse and out.
        if (m == -std::numeric_limits<T>::infinity() && !nan_score) {
          for (std::int64_t c = 0; c < d.Dv; ++c) oi[c] = 0;
          if (wi) {
            for (std::int64_t j = 0; j < d.Tk; ++j) wi[j] = 0;
          }
          p.lse(b, h, i) = m;
          continue;
        }
        T sum = 0;
        for (std::int64_t j = 0; j < d.Tk; ++j) sum += kept[j] ? std::exp(s[j] - m) : T(0);
        const T row_lse = m + std::log(sum);
        p.lse(b, h, i) = row_lse;
        probability_row(s.data(), kept.get(), d.Tk, row_lse, renormalizes(p.score_mod),
                        prob.data());
        if (wi) {
          for (std::int64_t j = 0; j < d.Tk; ++j) wi[j] = prob[j];
        }
        // Every kept key's value is read, also where P underflows to 0 or dropout drops it: an
        // inf or NaN in it gives NaN (0 * inf), as P @ V does in PyTorch.
        for (std::int64_t c = 0; c < d.Dv; ++c) oi[c] = 0;
        for (std::int64_t j = 0; j < d.Tk; ++j) {
          if (!kept[j]) continue;
          const T pd = prob[j] * dropout_scale<T>(d, p.dropout, b, h, i, j);
          const T* vj = p.v.at(b, j, hk);
          for (std::int64_t c = 0; c < d.Dv; ++c) oi[c] += pd * vj[c];
        }
      }
    }
  }
}

// Backward of attention_fwd_ref: q, k, v, out, lse, dout -> dq, dk, dv (overwritten), and dbias
// (accumulated, may be null) indexed through its broadcast offsets so that broadcast dimensions
// are summed.
template <class T, class ScoreMod, class MaskMod>
void attention_bwd_ref(const BwdParams<T, ScoreMod, MaskMod>& p) {
  const Dims& d = p.dims;
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t i = 0; i < d.Tq; ++i) {
      for (std::int64_t h = 0; h < d.Hq; ++h) std::fill_n(p.dq.at(b, i, h), d.D, T(0));
    }
    for (std::int64_t j = 0; j < d.Tk; ++j) {
      for (std::int64_t hk = 0; hk < d.Hk; ++hk) {
        std::fill_n(p.dk.at(b, j, hk), d.D, T(0));
        std::fill_n(p.dv.at(b, j, hk), d.Dv, T(0));
      }
    }
  }
  const detail::CaptureSink<T> sink{p.captured_ids, p.captured_grads, p.captured};
  std::vector<T> s(d.Tk);
  std::vector<T> prob(d.Tk);
  std::unique_ptr<bool[]> kept(new bool[d.Tk > 0 ? d.Tk : 1]);
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t h = 0; h < d.Hq; ++h) {
      const std::int64_t hk = h / d.group();
      for (std::int64_t i = 0; i < d.Tq; ++i) {
        const T row_lse = p.lse(b, h, i);
        if (row_lse == -std::numeric_limits<T>::infinity()) continue;  // zero gradients
        score_row(p, b, h, i, s.data(), kept.get());
        probability_row(s.data(), kept.get(), d.Tk, row_lse, renormalizes(p.score_mod),
                        prob.data());
        const T* qi = p.q.at(b, i, h);
        const T* doi = p.dout.at(b, i, h);
        const T* oi = p.out.at(b, i, h);
        T* dqi = p.dq.at(b, i, h);
        // D_i = rowsum(dO_i * O_i), which equals sum_j P_ij dP_ij even with dropout.
        const T delta = dot(doi, oi, d.Dv);
        for (std::int64_t j = 0; j < d.Tk; ++j) {
          if (!kept[j]) continue;
          const T* kj = p.k.at(b, j, hk);
          const T* vj = p.v.at(b, j, hk);
          // forward: Pd_ij = P_ij * z_ij; out_i = sum_j Pd_ij v_j
          const T pij = prob[j];
          const T z = dropout_scale<T>(d, p.dropout, b, h, i, j);
          T* dvj = p.dv.at(b, j, hk);
          for (std::int64_t c = 0; c < d.Dv; ++c) dvj[c] += pij * z * doi[c];
          // dP_ij = z_ij (dO_i . v_j); dS_ij = P_ij (dP_ij - D_i). With soft-capping, where P_ij >
          // 1/2 (one key at most per row) and dS_ij is finite, the difference is formed first.
          T ds = pij * (z * dot(doi, vj, d.Dv) - delta);
          if (renormalizes(p.score_mod) && pij > T(0.5) && std::isfinite(ds)) {
            ds = pij * dp_minus_delta(doi, vj, z, oi, d.Dv);
          }
          if (p.dbias != nullptr) p.dbias[p.dbias_index.offset(b, h, i, j)] += ds;
          // forward: s_ij = score_mod((scale q_i) . k_j); chain through ds'/ds by dual numbers
          const T raw = scaled_dot(p.scale, qi, kj, d.D);
          // and to what the mod captured: d captured += ds * ds'/d captured
          if (p.captured > 0) captured_row(p.score_mod, b, h, i, j, 1, &raw, &ds, sink);
          const T draw = ds * p.score_mod(Dual<T>{raw, T(1)}, b, h, i, j).d;
          // ds/dk = scale q_i, rounded as the forward rounded it; dq = scale (sum_j ds_j k_j),
          // the scale applied once to the row's sum. As the fused kernels associate them: scale
          // (ds q) would give inf where a subnormal scale q_i is 0 against an infinite ds_ij (0 x
          // inf is NaN), found by the fuzzer (f64, scale 2.8e-317, q 8e-320).
          T* dkj = p.dk.at(b, j, hk);
          for (std::int64_t c = 0; c < d.D; ++c) {
            dqi[c] += draw * kj[c];
            dkj[c] += draw * (p.scale * qi[c]);
          }
        }
        for (std::int64_t c = 0; c < d.D; ++c) dqi[c] *= p.scale;
      }
    }
  }
}

}  // namespace qkv::kernels::reference
