// The chunked linear attention kernel (linear.hpp), in matrix products through the BLAS. Work
// items are (batch, k/v head) pairs: each owns its query heads' rows of out and dq and its rows of
// dk and dv, and sums in a fixed order (one thread's BLAS calls on fixed shapes), so results are
// bitwise the same on any number of threads.
//
// Notation per item: the rows R of a chunk are its queries in each of the k/v head's query heads
// (row r = g * rows + i - i0 for query head hk * G + g); Fq [R, D] = phi(q); the chunk's band of
// keys [lo, hi) that only some of its rows keep has Fk [n, D] = phi(k) and Va [n, Dv + 1] = [v, 1];
// the state Sa [D, Dv + 1] = [S, z] = sum_j phi(k_j) [v_j, 1] over the keys [0, lo) every row
// keeps. Then [num, den - eps] = Fq Sa + (W masked) Va with W = Fq Fk^T, and out = num / den.
// D above becomes F, the number of features, under favor (qkv/linear_attention.hpp).
#include "kernels/cpu/linear.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/blas.hpp"
#include "kernels/cpu/features.hpp"

namespace qkv::kernels::cpu {
namespace {

// Queries per chunk under a causal mask, so also the widest band of keys weighted one by one;
// without one, queries per product with the state (there is no band); and keys per product when
// the state takes in keys outside any band (all of them without a causal mask), and per product
// of those keys' gradients. B 1, H 8, D 64, 2 threads of an AMD EPYC (avx2 avx512_bf16 avx512f),
// BLIS on its Skylake-X kernels, 2026-11-25, two alternated runs, ms forward / backward. Causal
// chunk 32: T 4096 13.3-14.0 / 45.5-46.2, T 16384 68.8-72.6 / 203-211; 64: 10.6 / 36.2-38.7,
// 59.8-60.8 / 165-169; 128: 10.4-10.7 / 34.5-35.1, 56.6-58.4 / 156-162 (the band's products grow
// with the chunk, the per-chunk overheads shrink). Without a mask, T 4096 / 16384 forward: 64
// rows and 256 keys 5.5-6.0 / 36.9-39.5; 256 and 1024 4.4-5.0 / 34.7-35.7; 1024 and 4096 4.3-4.7
// / 33.1-35.4.
constexpr std::int64_t kCausalChunk = 128;
constexpr std::int64_t kFullChunk = 256;
constexpr std::int64_t kKeyBlock = 1024;
// Under favor, the most a chunk's unit may exceed the key shift m_i of one of its rows (logits,
// natural log): the row's largest key feature is then at least exp(-kUnitSpread) / sqrt(F) in
// the chunk's unit, far from f32's underflow (exp(-87)), and its eps exp(m_i - unit) is nonzero.
// A chunk whose band would raise it further is cut short. An accuracy bound, not a speed
// constant: 20 leaves a row's smaller features 67 natural logs of f32 range below its largest
// (exp(-20) is 2e-9 of the unit); a cut costs one shorter chunk, where the logits jump.
constexpr double kUnitSpread = 20;

template <class T>
std::vector<T> buffer(std::int64_t n) {
  return std::vector<T>(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)), T(0));
}

// x [n] *= exp(shift), skipped when the shift is 0 or not finite (x is then all 0 or unused).
template <class T>
void rescale(T* x, std::int64_t n, T shift) {
  if (shift == T(0) || !std::isfinite(shift)) return;
  const T factor = std::exp(shift);
  for (std::int64_t c = 0; c < n; ++c) x[c] *= factor;
}

// Per-item buffers and the steps the forward and the backward share.
//
// Under favor, keys' features are exp(u - unit) / sqrt(F) with one shift, `unit`, shared by the
// state and the band of the chunk at hand: the largest key logit (kmax) over the keys taken in
// so far, raised (and the state rescaled) when a block of keys brings a larger one. Every row's
// own shift m_i (qkv/linear_attention.hpp) is at most the unit; it enters only through eps, as
// eps exp(m_i - unit) (row_eps). Under elu the unit is 0.
template <class T>
struct Item {
  const LinearParams<T>& p;
  std::int64_t b, hk, G, F, Dva;
  bool favor;
  std::int64_t rows_per_chunk;  // queries per chunk
  std::int64_t key_rows;        // keys per load: a band or a block of kKeyBlock
  std::vector<T> Fq, Fk, Va, W, numa;
  std::vector<T> X, U, kmax;  // favor: inputs [n, D], logits [n, F], largest logit per key [n]
  std::vector<T> eps;         // [rows] the chunk's rows' eps (row_eps)
  T unit;

  Item(const LinearParams<T>& params, std::int64_t batch, std::int64_t kv_head)
      : p(params),
        b(batch),
        hk(kv_head),
        G(params.dims.group()),
        F(params.F),
        Dva(params.dims.Dv + 1),
        favor(params.feature_map == FeatureMap::favor),
        rows_per_chunk(params.causal == Causal::none ? kFullChunk : kCausalChunk),
        key_rows(std::max(rows_per_chunk, kKeyBlock)),
        Fq(buffer<T>(G * rows_per_chunk * F)),
        Fk(buffer<T>(key_rows * F)),
        Va(buffer<T>(key_rows * Dva)),
        W(buffer<T>(params.causal == Causal::none ? 1 : G * rows_per_chunk * rows_per_chunk)),
        numa(buffer<T>(G * rows_per_chunk * Dva)),
        X(buffer<T>(favor ? std::max(G * rows_per_chunk, key_rows) * params.dims.D : 1)),
        U(buffer<T>(favor ? std::max(G * rows_per_chunk, key_rows) * F : 1)),
        kmax(buffer<T>(favor ? key_rows : 1)),
        eps(buffer<T>(rows_per_chunk)),
        unit(favor ? -std::numeric_limits<T>::infinity() : T(0)) {}

  std::int64_t head(std::int64_t r, std::int64_t rows) const { return hk * G + r / rows; }

  // U [n, F] = X [n, D] omega^T: the favor logits of the rows in X.
  void logits(std::int64_t n) {
    blas_gemm(false, true, n, F, p.dims.D, X.data(), p.dims.D, p.omega, p.dims.D, false, U.data(),
              F);
  }

  // The keys [j0, j0 + n): Va [n, Dv + 1] = [v, 1]; elu: Fk [n, F] = phi(k); favor: U [n, F] the
  // logits w_f . y - |y|^2 / 2 and kmax [n] their largest (key_features makes Fk of them).
  void load_keys(std::int64_t j0, std::int64_t n) {
    const Dims& d = p.dims;
    for (std::int64_t j = 0; j < n; ++j) {
      std::copy_n(p.v.at(b, j0 + j, hk), d.Dv, Va.data() + j * Dva);
      Va[j * Dva + d.Dv] = T(1);
      if (!favor) elu_features(p.k.at(b, j0 + j, hk), d.D, Fk.data() + j * F);
    }
    if (!favor || n == 0) return;
    for (std::int64_t j = 0; j < n; ++j)
      std::copy_n(p.k.at(b, j0 + j, hk), d.D, X.data() + j * d.D);
    logits(n);
    for (std::int64_t j = 0; j < n; ++j) {
      const T* y = X.data() + j * d.D;
      T half_norm = 0;
      for (std::int64_t c = 0; c < d.D; ++c) half_norm += y[c] * y[c];
      half_norm *= p.scale / 2;
      T* u = U.data() + j * F;
      for (std::int64_t f = 0; f < F; ++f) u[f] -= half_norm;
      kmax[j] = *std::max_element(u, u + F);
    }
  }

  // The largest of kmax [0, n) (favor; -inf for none).
  T largest(std::int64_t n) const {
    T m = -std::numeric_limits<T>::infinity();
    for (std::int64_t j = 0; j < n; ++j) m = std::max(m, kmax[j]);
    return m;
  }

  // Raises the unit to m (favor), rescaling the state Sa [F, Dv + 1] with it.
  void raise_unit(T m, T* Sa) {
    if (!(m > unit)) return;
    rescale(Sa, F * Dva, unit - m);
    unit = m;
  }

  // The rows of the chunk starting at i0 whose state holds the keys [0, lo = visible_end(i0))
  // with largest logit m_lo: rows_per_chunk (or up to Tq), or under favor fewer, so that the
  // chunk's unit exceeds no row's shift m_i by more than kUnitSpread. Under favor the band of
  // the full chunk is loaded (load_keys), its prefix the band of the rows returned.
  std::int64_t plan(std::int64_t i0, T m_lo) {
    const std::int64_t rows = std::min(rows_per_chunk, p.dims.Tq - i0);
    if (!favor) return rows;
    const std::int64_t lo = p.visible_end(b, i0);
    load_keys(lo, p.visible_end(b, i0 + rows - 1) - lo);
    T first = m_lo, m = m_lo;  // first: m_i of the first row that keeps a key
    std::int64_t seen = 0;
    for (std::int64_t i = 0; i < rows; ++i) {
      for (; seen < p.visible_end(b, i0 + i) - lo; ++seen) m = std::max(m, kmax[seen]);
      if (!std::isfinite(first)) first = m;
      if (m - first > T(kUnitSpread)) return std::max<std::int64_t>(i, 1);
    }
    return rows;
  }

  // Fk [n, F] = exp(U - unit) / sqrt(F) of the keys load_keys left (favor).
  void key_features(std::int64_t n) {
    if (!favor) return;
    const T factor = T(1) / std::sqrt(static_cast<T>(F));
    for (std::int64_t j = 0; j < n; ++j) {
      exp_features(U.data() + j * F, F, unit, factor, Fk.data() + j * F);
    }
  }

  // Sa [F, Dv + 1] += phi(K)^T [V, 1] over the keys [from, to), kKeyBlock at a time.
  void add_keys(std::int64_t from, std::int64_t to, T* Sa) {
    for (std::int64_t j0 = from; j0 < to; j0 += kKeyBlock) {
      const std::int64_t n = std::min(kKeyBlock, to - j0);
      load_keys(j0, n);
      if (favor) raise_unit(largest(n), Sa);
      key_features(n);
      blas_gemm(true, false, F, Dva, n, Fk.data(), F, Va.data(), Dva, true, Sa, Dva);
    }
  }

  // Fq [R, F] = phi(q) of the chunk's rows [i0, i0 + rows) in each query head.
  void query_features(std::int64_t i0, std::int64_t rows) {
    const Dims& d = p.dims;
    const std::int64_t R = G * rows;
    if (!favor) {
      for (std::int64_t r = 0; r < R; ++r) {
        elu_features(p.q.at(b, i0 + r % rows, head(r, rows)), d.D, Fq.data() + r * F);
      }
      return;
    }
    for (std::int64_t r = 0; r < R; ++r) {
      std::copy_n(p.q.at(b, i0 + r % rows, head(r, rows)), d.D, X.data() + r * d.D);
    }
    logits(R);
    const T factor = T(1) / std::sqrt(static_cast<T>(F));
    for (std::int64_t r = 0; r < R; ++r) {
      const T* u = U.data() + r * F;
      exp_features(u, F, *std::max_element(u, u + F), factor, Fq.data() + r * F);
    }
  }

  // eps [rows] of the chunk's rows, whose keys before the band [lo, lo + n) have largest logit
  // m_lo: eps exp(m_i - unit), m_i the largest logit over the keys row i keeps (favor); eps for a
  // row that keeps no key (its num and den are 0).
  void row_eps(std::int64_t i0, std::int64_t rows, std::int64_t lo, T m_lo) {
    std::int64_t seen = 0;  // kmax [0, seen) of the band taken into m
    T m = m_lo;
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t kept = p.visible_end(b, i0 + i);
      if (!favor || kept == 0) {
        eps[i] = p.eps;
        continue;
      }
      for (; seen < kept - lo; ++seen) m = std::max(m, kmax[seen]);
      eps[i] = p.eps * std::exp(m - unit);
    }
  }

  // For the chunk [i0, i0 + rows) with band [lo, lo + n) (in Fk, Va) and state Sa: Fq, the
  // masked band weights W [R, n] and numa [R, Dv + 1] = [num, den - eps].
  void chunk(std::int64_t i0, std::int64_t rows, std::int64_t lo, std::int64_t n, const T* Sa) {
    const std::int64_t R = G * rows;
    query_features(i0, rows);
    // numa = Fq Sa + (W masked) Va, W = Fq Fk^T
    blas_gemm(false, false, R, Dva, F, Fq.data(), F, Sa, Dva, false, numa.data(), Dva);
    if (n == 0) return;
    blas_gemm(false, true, R, n, F, Fq.data(), F, Fk.data(), F, false, W.data(), n);
    mask(i0, rows, lo, n, W.data());
    blas_gemm(false, false, R, Dva, n, W.data(), n, Va.data(), Dva, true, numa.data(), Dva);
  }

  // X [R, n]: the band keys row r does not keep set to 0.
  void mask(std::int64_t i0, std::int64_t rows, std::int64_t lo, std::int64_t n, T* Xr) const {
    for (std::int64_t r = 0; r < G * rows; ++r) {
      const std::int64_t kept = p.visible_end(b, i0 + r % rows) - lo;
      std::fill(Xr + r * n + std::max<std::int64_t>(kept, 0), Xr + (r + 1) * n, T(0));
    }
  }

  // dk of the keys [j0, j0 + n) (loaded, features in Fk) from dFk [n, F], the gradient of their
  // features (dFk is overwritten). elu: dk = dFk phi'(k); favor (shifts held constant): dU = dFk
  // Fk, dk = dU omega - s k rowsum(dU).
  void key_grads(std::int64_t j0, std::int64_t n, T* dFk) {
    const Dims& d = p.dims;
    if (!favor) {
      for (std::int64_t j = 0; j < n; ++j) {
        elu_feature_grads(p.k.at(b, j0 + j, hk), dFk + j * F, d.D, p.dk.at(b, j0 + j, hk));
      }
      return;
    }
    for (std::int64_t c = 0; c < n * F; ++c) dFk[c] *= Fk[c];
    blas_gemm(false, false, n, d.D, F, dFk, F, p.omega, d.D, false, X.data(), d.D);
    for (std::int64_t j = 0; j < n; ++j) {
      T sum = 0;
      for (std::int64_t f = 0; f < F; ++f) sum += dFk[j * F + f];
      const T* k = p.k.at(b, j0 + j, hk);
      T* dk = p.dk.at(b, j0 + j, hk);
      for (std::int64_t c = 0; c < d.D; ++c) dk[c] = X[j * d.D + c] - sum * p.scale * k[c];
    }
  }

  // dq of the chunk's rows from da [R, F], the gradient of Fq (da is overwritten). elu: dq = da
  // phi'(q); favor (shift held constant): dq = (da Fq) omega.
  void query_grads(std::int64_t i0, std::int64_t rows, T* da) {
    const Dims& d = p.dims;
    const std::int64_t R = G * rows;
    if (favor) {
      for (std::int64_t c = 0; c < R * F; ++c) da[c] *= Fq[c];
      blas_gemm(false, false, R, d.D, F, da, F, p.omega, d.D, false, X.data(), d.D);
    }
    for (std::int64_t r = 0; r < R; ++r) {
      const std::int64_t i = i0 + r % rows, h = head(r, rows);
      if (favor) {
        std::copy_n(X.data() + r * d.D, d.D, p.dq.at(b, i, h));
      } else {
        elu_feature_grads(p.q.at(b, i, h), da + r * F, d.D, p.dq.at(b, i, h));
      }
    }
  }
};

template <class T>
void forward_item(const LinearParams<T>& p, std::int64_t b, std::int64_t hk) {
  const Dims& d = p.dims;
  Item<T> it(p, b, hk);
  std::vector<T> Sa = buffer<T>(it.F * it.Dva);
  std::int64_t boundary = 0;  // Sa holds the keys [0, boundary)
  for (std::int64_t i0 = 0, rows = 0; i0 < d.Tq; i0 += rows) {
    const std::int64_t lo = p.visible_end(b, i0);
    it.add_keys(boundary, lo, Sa.data());
    boundary = lo;
    const T m_lo = it.unit;
    rows = it.plan(i0, m_lo);
    const std::int64_t hi = p.visible_end(b, i0 + rows - 1);
    if (!it.favor) it.load_keys(lo, hi - lo);
    if (it.favor) it.raise_unit(it.largest(hi - lo), Sa.data());
    it.key_features(hi - lo);
    it.chunk(i0, rows, lo, hi - lo, Sa.data());
    it.row_eps(i0, rows, lo, m_lo);
    // out = num / den
    for (std::int64_t r = 0; r < it.G * rows; ++r) {
      const T* numa = it.numa.data() + r * it.Dva;
      const T den = numa[d.Dv] + it.eps[r % rows];
      T* out = p.out.at(b, i0 + r % rows, it.head(r, rows));
      for (std::int64_t c = 0; c < d.Dv; ++c) out[c] = numa[c] / den;
    }
  }
}

template <class T>
void backward_item(const LinearParams<T>& p, std::int64_t b, std::int64_t hk) {
  const Dims& d = p.dims;
  Item<T> it(p, b, hk);
  const std::int64_t F = it.F, Dva = it.Dva;
  // The chunks (their first rows, and Tq), and the state at each chunk's start and its unit (one
  // state without a causal mask: every chunk starts with all the keys), by the forward's pass
  // over the keys.
  const bool causal = p.causal != Causal::none;
  std::vector<std::int64_t> starts;
  std::vector<T> states, units;
  {
    std::vector<T> Sa = buffer<T>(F * Dva);
    std::int64_t boundary = 0;
    for (std::int64_t i0 = 0, rows = 0; i0 < d.Tq; i0 += rows) {
      starts.push_back(i0);
      if (causal || i0 == 0) {
        const std::int64_t lo = p.visible_end(b, i0);
        it.add_keys(boundary, lo, Sa.data());
        boundary = lo;
        states.insert(states.end(), Sa.begin(), Sa.end());
        units.push_back(it.unit);
      }
      rows = causal ? it.plan(i0, it.unit) : std::min(it.rows_per_chunk, d.Tq - i0);
    }
    starts.push_back(d.Tq);
  }
  const auto chunks = static_cast<std::int64_t>(starts.size()) - 1;
  for (std::int64_t t = 0; t < d.Tk; ++t) {  // keys no row keeps get 0
    std::fill_n(p.dk.at(b, t, hk), d.D, T(0));
    std::fill_n(p.dv.at(b, t, hk), d.Dv, T(0));
  }
  // dSa [F, Dv + 1] = sum_r Fq_r^T [dnum_r, dden_r] over the rows of the chunks after the current
  // one: the gradient of the state they read, relative to the unit (favor: a later chunk's state
  // read in unit m' enters as exp(unit - m') times its gradient).
  std::vector<T> dSa = buffer<T>(F * Dva), Sa = buffer<T>(F * Dva);
  it.unit = -std::numeric_limits<T>::infinity();
  if (!it.favor) it.unit = T(0);
  const std::int64_t R_max = it.G * it.rows_per_chunk;
  std::vector<T> dnuma = buffer<T>(R_max * Dva), da = buffer<T>(R_max * F);
  std::vector<T> dW = buffer<T>(causal ? R_max * it.rows_per_chunk : 1);
  std::vector<T> dFk = buffer<T>(it.key_rows * F), dV = buffer<T>(it.key_rows * d.Dv);
  // Keys [j0, j0 + n), loaded in Fk and Va, with dFk and dV holding what the band gave them: add
  // what the later rows give through the state (db_j = dS v_j + dz = dSa [v_j, 1], dv_j = dS^T
  // phi(k_j)), then dk_j from db_j.
  const auto finish_keys = [&](std::int64_t j0, std::int64_t n) {
    blas_gemm(false, true, n, F, Dva, it.Va.data(), Dva, dSa.data(), Dva, true, dFk.data(), F);
    blas_gemm(false, false, n, d.Dv, F, it.Fk.data(), F, dSa.data(), Dva, true, dV.data(), d.Dv);
    it.key_grads(j0, n, dFk.data());
    for (std::int64_t j = 0; j < n; ++j) {
      std::copy_n(dV.data() + j * d.Dv, d.Dv, p.dv.at(b, j0 + j, hk));
    }
  };
  // Keys outside every band, kKeyBlock at a time: only the state's gradient reaches them.
  const auto state_keys = [&](std::int64_t from, std::int64_t to) {
    for (std::int64_t j0 = from; j0 < to; j0 += kKeyBlock) {
      const std::int64_t n = std::min(kKeyBlock, to - j0);
      it.load_keys(j0, n);
      it.key_features(n);
      std::fill_n(dFk.begin(), n * F, T(0));
      std::fill_n(dV.begin(), n * d.Dv, T(0));
      finish_keys(j0, n);
    }
  };
  std::int64_t seen_from = p.visible_end(b, d.Tq - 1);  // keys [seen_from, Tk) done or unkept
  for (std::int64_t c = chunks - 1; c >= 0; --c) {
    const std::int64_t i0 = starts[c], rows = starts[c + 1] - i0;
    const std::int64_t R = it.G * rows;
    const std::int64_t lo = p.visible_end(b, i0), hi = p.visible_end(b, i0 + rows - 1);
    const std::int64_t n = hi - lo;
    const std::int64_t s = causal ? c : 0;
    // Keys [hi, seen_from): kept only by the rows of later chunks, through their states.
    state_keys(hi, seen_from);
    it.load_keys(lo, n);
    // This chunk's unit: its state's, raised by its band; dSa and the state follow it down.
    const T m_c = it.favor ? std::max(units[s], it.largest(n)) : T(0);
    if (std::isfinite(it.unit)) rescale(dSa.data(), F * Dva, m_c - it.unit);
    it.unit = m_c;
    std::copy_n(states.begin() + s * F * Dva, F * Dva, Sa.begin());
    rescale(Sa.data(), F * Dva, units[s] - m_c);
    it.key_features(n);
    it.chunk(i0, rows, lo, n, Sa.data());
    it.row_eps(i0, rows, lo, units[s]);
    // out = num / den  ->  dnum = dout / den, dden = -(dout . out) / den (not over den^2, which
    // underflows to 0 for a tiny eps in a row that keeps nothing)
    for (std::int64_t r = 0; r < R; ++r) {
      const T* numa = it.numa.data() + r * Dva;
      const T den = numa[d.Dv] + it.eps[r % rows];
      const T* dout = p.dout.at(b, i0 + r % rows, it.head(r, rows));
      T* g = dnuma.data() + r * Dva;
      T dout_out = 0;
      for (std::int64_t x = 0; x < d.Dv; ++x) {
        g[x] = dout[x] / den;
        dout_out += dout[x] * (numa[x] / den);
      }
      g[d.Dv] = -dout_out / den;
    }
    // numa = Fq Sa + W Va, W = Fq Fk^T masked  ->
    //   da = dnuma Sa^T + dW Fk with dW = dnuma Va^T masked; dFk = dW^T Fq; dV = W^T dnum
    blas_gemm(false, true, R, F, Dva, dnuma.data(), Dva, Sa.data(), Dva, false, da.data(), F);
    if (n > 0) {
      blas_gemm(false, true, R, n, Dva, dnuma.data(), Dva, it.Va.data(), Dva, false, dW.data(), n);
      it.mask(i0, rows, lo, n, dW.data());
      blas_gemm(false, false, R, F, n, dW.data(), n, it.Fk.data(), F, true, da.data(), F);
      blas_gemm(true, false, n, F, R, dW.data(), n, it.Fq.data(), F, false, dFk.data(), F);
      blas_gemm(true, false, n, d.Dv, R, it.W.data(), n, dnuma.data(), Dva, false, dV.data(), d.Dv);
      finish_keys(lo, n);  // with the later rows' dSa, before this chunk's rows join it
    }
    // This chunk's rows read Sa: dSa += Fq^T dnuma
    blas_gemm(true, false, F, Dva, R, it.Fq.data(), F, dnuma.data(), Dva, true, dSa.data(), Dva);
    // Fq = phi(q)  ->  dq from da
    it.query_grads(i0, rows, da.data());
    seen_from = std::min(seen_from, lo);
  }
  // Keys [0, seen_from): kept by every row from chunk 0 on, through the states.
  state_keys(0, seen_from);
}

template <class T, class Run>
void for_items(const LinearParams<T>& p, Run run) {
  const std::int64_t items = p.dims.B * p.dims.Hk;
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t n = 0; n < items; ++n) run(p, n / p.dims.Hk, n % p.dims.Hk);
}

}  // namespace

void linear_forward(const LinearParams<float>& p) { for_items(p, forward_item<float>); }
void linear_forward(const LinearParams<double>& p) { for_items(p, forward_item<double>); }
void linear_backward(const LinearParams<float>& p) { for_items(p, backward_item<float>); }
void linear_backward(const LinearParams<double>& p) { for_items(p, backward_item<double>); }

}  // namespace qkv::kernels::cpu
