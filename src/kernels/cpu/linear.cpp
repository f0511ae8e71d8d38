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
#include "kernels/cpu/linear.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
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

template <class T>
std::vector<T> buffer(std::int64_t n) {
  return std::vector<T>(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)), T(0));
}

// The keys [j0, j0 + n) of k/v head hk of batch b: Fk [n, D] = phi(k), Va [n, Dv + 1] = [v, 1].
template <class T>
void load_keys(const LinearParams<T>& p, std::int64_t b, std::int64_t hk, std::int64_t j0,
               std::int64_t n, T* Fk, T* Va) {
  const Dims& d = p.dims;
  for (std::int64_t j = 0; j < n; ++j) {
    elu_features(p.k.at(b, j0 + j, hk), d.D, Fk + j * d.D);
    std::copy_n(p.v.at(b, j0 + j, hk), d.Dv, Va + j * (d.Dv + 1));
    Va[j * (d.Dv + 1) + d.Dv] = T(1);
  }
}

// Per-item buffers and the steps the forward and the backward share.
template <class T>
struct Item {
  const LinearParams<T>& p;
  std::int64_t b, hk, G, Dva;
  std::int64_t rows_per_chunk;  // queries per chunk
  std::vector<T> Fq, Fk, Va, W, numa;

  Item(const LinearParams<T>& params, std::int64_t batch, std::int64_t kv_head)
      : p(params),
        b(batch),
        hk(kv_head),
        G(params.dims.group()),
        Dva(params.dims.Dv + 1),
        rows_per_chunk(params.causal == Causal::none ? kFullChunk : kCausalChunk),
        Fq(buffer<T>(G * rows_per_chunk * params.dims.D)),
        Fk(buffer<T>(std::max(rows_per_chunk, kKeyBlock) * params.dims.D)),
        Va(buffer<T>(std::max(rows_per_chunk, kKeyBlock) * (params.dims.Dv + 1))),
        W(buffer<T>(params.causal == Causal::none ? 1 : G * rows_per_chunk * rows_per_chunk)),
        numa(buffer<T>(G * rows_per_chunk * (params.dims.Dv + 1))) {}

  std::int64_t head(std::int64_t r, std::int64_t rows) const { return hk * G + r / rows; }

  // Sa [D, Dv + 1] += phi(K)^T [V, 1] over the keys [from, to), kKeyBlock at a time.
  void add_keys(std::int64_t from, std::int64_t to, T* Sa) {
    const Dims& d = p.dims;
    for (std::int64_t j0 = from; j0 < to; j0 += kKeyBlock) {
      const std::int64_t n = std::min(kKeyBlock, to - j0);
      load_keys(p, b, hk, j0, n, Fk.data(), Va.data());
      blas_gemm(true, false, d.D, Dva, n, Fk.data(), d.D, Va.data(), Dva, true, Sa, Dva);
    }
  }

  // For the chunk [i0, i0 + rows) with band [lo, hi) (loaded into Fk, Va) and state Sa: Fq, the
  // masked band weights W [R, n] and numa [R, Dv + 1] = [num, den - eps].
  void chunk(std::int64_t i0, std::int64_t rows, std::int64_t lo, std::int64_t n, const T* Sa) {
    const Dims& d = p.dims;
    const std::int64_t R = G * rows;
    for (std::int64_t r = 0; r < R; ++r) {
      elu_features(p.q.at(b, i0 + r % rows, head(r, rows)), d.D, Fq.data() + r * d.D);
    }
    // numa = Fq Sa + (W masked) Va, W = Fq Fk^T
    blas_gemm(false, false, R, Dva, d.D, Fq.data(), d.D, Sa, Dva, false, numa.data(), Dva);
    if (n == 0) return;
    blas_gemm(false, true, R, n, d.D, Fq.data(), d.D, Fk.data(), d.D, false, W.data(), n);
    mask(i0, rows, lo, n, W.data());
    blas_gemm(false, false, R, Dva, n, W.data(), n, Va.data(), Dva, true, numa.data(), Dva);
  }

  // X [R, n]: the band keys row r does not keep set to 0.
  void mask(std::int64_t i0, std::int64_t rows, std::int64_t lo, std::int64_t n, T* X) const {
    for (std::int64_t r = 0; r < G * rows; ++r) {
      const std::int64_t kept = p.visible_end(b, i0 + r % rows) - lo;
      std::fill(X + r * n + std::max<std::int64_t>(kept, 0), X + (r + 1) * n, T(0));
    }
  }
};

template <class T>
void forward_item(const LinearParams<T>& p, std::int64_t b, std::int64_t hk) {
  const Dims& d = p.dims;
  Item<T> it(p, b, hk);
  std::vector<T> Sa = buffer<T>(d.D * it.Dva);
  std::int64_t boundary = 0;  // Sa holds the keys [0, boundary)
  for (std::int64_t i0 = 0; i0 < d.Tq; i0 += it.rows_per_chunk) {
    const std::int64_t rows = std::min(it.rows_per_chunk, d.Tq - i0);
    const std::int64_t lo = p.visible_end(b, i0), hi = p.visible_end(b, i0 + rows - 1);
    it.add_keys(boundary, lo, Sa.data());
    boundary = lo;
    load_keys(p, b, hk, lo, hi - lo, it.Fk.data(), it.Va.data());
    it.chunk(i0, rows, lo, hi - lo, Sa.data());
    // out = num / den
    for (std::int64_t r = 0; r < it.G * rows; ++r) {
      const T* numa = it.numa.data() + r * it.Dva;
      const T den = numa[d.Dv] + p.eps;
      T* out = p.out.at(b, i0 + r % rows, it.head(r, rows));
      for (std::int64_t c = 0; c < d.Dv; ++c) out[c] = numa[c] / den;
    }
  }
}

template <class T>
void backward_item(const LinearParams<T>& p, std::int64_t b, std::int64_t hk) {
  const Dims& d = p.dims;
  Item<T> it(p, b, hk);
  const std::int64_t Dva = it.Dva;
  const std::int64_t chunks = (d.Tq + it.rows_per_chunk - 1) / it.rows_per_chunk;
  // The state at each chunk's start (one state without a causal mask: every chunk starts with
  // all the keys), by the forward's pass over the keys.
  const bool causal = p.causal != Causal::none;
  const std::int64_t kept_states = causal ? chunks : 1;
  std::vector<T> states = buffer<T>(kept_states * d.D * Dva);
  {
    std::vector<T> Sa = buffer<T>(d.D * Dva);
    std::int64_t boundary = 0;
    for (std::int64_t c = 0; c < kept_states; ++c) {
      const std::int64_t lo = p.visible_end(b, c * it.rows_per_chunk);
      it.add_keys(boundary, lo, Sa.data());
      boundary = lo;
      std::copy(Sa.begin(), Sa.end(), states.begin() + c * d.D * Dva);
    }
  }
  for (std::int64_t t = 0; t < d.Tk; ++t) {  // keys no row keeps get 0
    std::fill_n(p.dk.at(b, t, hk), d.D, T(0));
    std::fill_n(p.dv.at(b, t, hk), d.Dv, T(0));
  }
  // dSa [D, Dv + 1] = sum_r Fq_r^T [dnum_r, dden_r] over the rows of the chunks after the current
  // one: the gradient of the state they read.
  std::vector<T> dSa = buffer<T>(d.D * Dva);
  const std::int64_t R_max = it.G * it.rows_per_chunk,
                     n_max = std::max(it.rows_per_chunk, kKeyBlock);
  std::vector<T> dnuma = buffer<T>(R_max * Dva), da = buffer<T>(R_max * d.D);
  std::vector<T> dW = buffer<T>(causal ? R_max * it.rows_per_chunk : 1);
  std::vector<T> dFk = buffer<T>(n_max * d.D), dV = buffer<T>(n_max * d.Dv);
  // Keys [j0, j0 + n), loaded in Fk and Va, with dFk and dV holding what the band gave them: add
  // what the later rows give through the state (db_j = dS v_j + dz = dSa [v_j, 1], dv_j = dS^T
  // phi(k_j)), then dk_j = db_j phi'(k_j).
  const auto finish_keys = [&](std::int64_t j0, std::int64_t n) {
    blas_gemm(false, true, n, d.D, Dva, it.Va.data(), Dva, dSa.data(), Dva, true, dFk.data(), d.D);
    blas_gemm(false, false, n, d.Dv, d.D, it.Fk.data(), d.D, dSa.data(), Dva, true, dV.data(),
              d.Dv);
    for (std::int64_t j = 0; j < n; ++j) {
      elu_feature_grads(p.k.at(b, j0 + j, hk), dFk.data() + j * d.D, d.D, p.dk.at(b, j0 + j, hk));
      std::copy_n(dV.data() + j * d.Dv, d.Dv, p.dv.at(b, j0 + j, hk));
    }
  };
  // Keys outside every band, kKeyBlock at a time: only the state's gradient reaches them.
  const auto state_keys = [&](std::int64_t from, std::int64_t to) {
    for (std::int64_t j0 = from; j0 < to; j0 += kKeyBlock) {
      const std::int64_t n = std::min(kKeyBlock, to - j0);
      load_keys(p, b, hk, j0, n, it.Fk.data(), it.Va.data());
      std::fill_n(dFk.begin(), n * d.D, T(0));
      std::fill_n(dV.begin(), n * d.Dv, T(0));
      finish_keys(j0, n);
    }
  };
  std::int64_t seen_from = p.visible_end(b, d.Tq - 1);  // keys [seen_from, Tk) done or unkept
  for (std::int64_t c = chunks - 1; c >= 0; --c) {
    const std::int64_t i0 = c * it.rows_per_chunk, rows = std::min(it.rows_per_chunk, d.Tq - i0);
    const std::int64_t R = it.G * rows;
    const std::int64_t lo = p.visible_end(b, i0), hi = p.visible_end(b, i0 + rows - 1);
    const std::int64_t n = hi - lo;
    const T* Sa = states.data() + (causal ? c : 0) * d.D * Dva;
    // Keys [hi, seen_from): kept only by the rows of later chunks, through their states.
    state_keys(hi, seen_from);
    load_keys(p, b, hk, lo, n, it.Fk.data(), it.Va.data());
    it.chunk(i0, rows, lo, n, Sa);
    // out = num / den  ->  dnum = dout / den, dden = -(dout . out) / den (not over den^2, which
    // underflows to 0 for a tiny eps in a row that keeps nothing)
    for (std::int64_t r = 0; r < R; ++r) {
      const T* numa = it.numa.data() + r * Dva;
      const T den = numa[d.Dv] + p.eps;
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
    blas_gemm(false, true, R, d.D, Dva, dnuma.data(), Dva, Sa, Dva, false, da.data(), d.D);
    if (n > 0) {
      blas_gemm(false, true, R, n, Dva, dnuma.data(), Dva, it.Va.data(), Dva, false, dW.data(), n);
      it.mask(i0, rows, lo, n, dW.data());
      blas_gemm(false, false, R, d.D, n, dW.data(), n, it.Fk.data(), d.D, true, da.data(), d.D);
      blas_gemm(true, false, n, d.D, R, dW.data(), n, it.Fq.data(), d.D, false, dFk.data(), d.D);
      blas_gemm(true, false, n, d.Dv, R, it.W.data(), n, dnuma.data(), Dva, false, dV.data(), d.Dv);
      finish_keys(lo, n);  // with the later rows' dSa, before this chunk's rows join it
    }
    // Fq = phi(q)  ->  dq = da phi'(q)
    for (std::int64_t r = 0; r < R; ++r) {
      const std::int64_t i = i0 + r % rows, h = it.head(r, rows);
      elu_feature_grads(p.q.at(b, i, h), da.data() + r * d.D, d.D, p.dq.at(b, i, h));
    }
    // This chunk's rows read Sa: dSa += Fq^T dnuma
    blas_gemm(true, false, d.D, Dva, R, it.Fq.data(), d.D, dnuma.data(), Dva, true, dSa.data(),
              Dva);
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
