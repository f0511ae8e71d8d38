// Linear attention evaluated as its formula reads, in f64 (linear_ref.hpp).
#include "kernels/reference/linear_ref.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace qkv::kernels::reference {
namespace {

// The feature map of qkv/linear_attention.hpp. Under favor, logits u of x [D]: u_f = w_f . x for
// a query (omega holds w_f times sqrt(s)), minus s |x|^2 / 2 for a key.
struct Features {
  const LinearParams<double>& p;

  bool favor() const { return p.feature_map == FeatureMap::favor; }

  std::vector<double> logits(const double* x, bool key) const {
    const std::int64_t D = p.dims.D;
    std::vector<double> u(static_cast<std::size_t>(p.F));
    double half_norm = 0;
    for (std::int64_t c = 0; c < D; ++c) half_norm += x[c] * x[c];
    half_norm *= p.scale / 2;
    for (std::int64_t f = 0; f < p.F; ++f) {
      double dot = 0;
      for (std::int64_t c = 0; c < D; ++c) dot += p.omega[f * D + c] * x[c];
      u[f] = key ? dot - half_norm : dot;
    }
    return u;
  }

  // phi(q) [F]: elu(q) + 1, or exp(u_f - max_f u_f) / sqrt(F).
  std::vector<double> query(const double* q) const {
    if (!favor()) {
      std::vector<double> a(static_cast<std::size_t>(p.F));
      for (std::int64_t c = 0; c < p.F; ++c) a[c] = elu_feature(q[c]);
      return a;
    }
    std::vector<double> a = logits(q, false);
    const double m = *std::max_element(a.begin(), a.end());
    for (double& x : a) x = std::exp(x - m) / std::sqrt(static_cast<double>(p.F));
    return a;
  }

  // phi_i(k) [F] for a row whose key shift is m: elu(k) + 1, or exp(u_f - m) / sqrt(F).
  std::vector<double> key(const double* k, double m) const {
    if (!favor()) return query(k);
    std::vector<double> b = logits(k, true);
    for (double& x : b) x = std::exp(x - m) / std::sqrt(static_cast<double>(p.F));
    return b;
  }

  // m_i over the keys [0, kept) of k/v head hk of batch b (0 under elu, which has no shift).
  double shift(std::int64_t b, std::int64_t hk, std::int64_t kept) const {
    if (!favor()) return 0;
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < kept; ++j) {
      const std::vector<double> u = logits(p.k.at(b, j, hk), true);
      m = std::max(m, *std::max_element(u.begin(), u.end()));
    }
    return m;
  }

  // x [D] += the gradient that reaches it through its features f [F] given their gradient
  // g [F]: elu: g phi'(x); favor (shifts held constant): sum_f g_f f_f (w_f - s x [key]).
  void backward(const double* x, const std::vector<double>& f, const std::vector<double>& g,
                bool key, double* dx) const {
    const std::int64_t D = p.dims.D;
    if (!favor()) {
      for (std::int64_t c = 0; c < D; ++c) dx[c] += g[c] * elu_feature_slope(x[c]);
      return;
    }
    double sum = 0;
    for (std::int64_t q = 0; q < p.F; ++q) {
      const double du = g[q] * f[q];
      sum += du;
      for (std::int64_t c = 0; c < D; ++c) dx[c] += du * p.omega[q * D + c];
    }
    if (key) {
      for (std::int64_t c = 0; c < D; ++c) dx[c] -= sum * p.scale * x[c];
    }
  }
};

// Row i of head h of batch b: a = phi(q_i) [F], the features phi_i(k_j) [kept, F] and weights w
// [kept] of its kept keys (the first `kept`), num = sum_j w_j v_j [Dv] and den = sum_j w_j + eps.
struct LinearRow {
  std::vector<double> a, w, num;
  std::vector<std::vector<double>> keys;
  double den = 0;
  std::int64_t kept = 0;
};

LinearRow linear_row(const LinearParams<double>& p, std::int64_t b, std::int64_t h,
                     std::int64_t i) {
  const Dims& d = p.dims;
  const Features phi{p};
  const std::int64_t hk = h / d.group();
  LinearRow r;
  r.kept = p.visible_end(b, i);
  r.a = phi.query(p.q.at(b, i, h));
  const double m = phi.shift(b, hk, r.kept);
  r.w.assign(static_cast<std::size_t>(r.kept), 0.0);
  r.num.assign(static_cast<std::size_t>(d.Dv), 0.0);
  double sum = 0;
  for (std::int64_t j = 0; j < r.kept; ++j) {
    r.keys.push_back(phi.key(p.k.at(b, j, hk), m));
    double w = 0;
    for (std::int64_t c = 0; c < p.F; ++c) w += r.a[c] * r.keys.back()[c];
    r.w[j] = w;
    sum += w;
    const double* v = p.v.at(b, j, hk);
    for (std::int64_t c = 0; c < d.Dv; ++c) r.num[c] += w * v[c];
  }
  r.den = sum + p.eps;
  return r;
}

}  // namespace

void linear_forward(const LinearParams<double>& p) {
  const Dims& d = p.dims;
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t h = 0; h < d.Hq; ++h) {
      for (std::int64_t i = 0; i < d.Tq; ++i) {
        const LinearRow r = linear_row(p, b, h, i);
        double* out = p.out.at(b, i, h);
        // out_i = num_i / den_i
        for (std::int64_t c = 0; c < d.Dv; ++c) out[c] = r.num[c] / r.den;
      }
    }
  }
}

void linear_backward(const LinearParams<double>& p) {
  const Dims& d = p.dims;
  const Features phi{p};
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t t = 0; t < d.Tk; ++t) {
      for (std::int64_t hk = 0; hk < d.Hk; ++hk) {
        std::fill_n(p.dk.at(b, t, hk), d.D, 0.0);
        std::fill_n(p.dv.at(b, t, hk), d.Dv, 0.0);
      }
    }
    for (std::int64_t h = 0; h < d.Hq; ++h) {
      const std::int64_t hk = h / d.group();
      for (std::int64_t i = 0; i < d.Tq; ++i) {
        const LinearRow r = linear_row(p, b, h, i);
        const double* dout = p.dout.at(b, i, h);
        // out = num / den  ->  dnum = dout / den, dden = -(dout . out) / den (not over den^2,
        // which underflows to 0 for a tiny eps in a row that keeps nothing)
        std::vector<double> dnum(static_cast<std::size_t>(d.Dv));
        double dout_out = 0;
        for (std::int64_t c = 0; c < d.Dv; ++c) {
          dnum[c] = dout[c] / r.den;
          dout_out += dout[c] * (r.num[c] / r.den);
        }
        const double dden = -dout_out / r.den;
        std::vector<double> da(static_cast<std::size_t>(p.F), 0.0);
        std::vector<double> db(static_cast<std::size_t>(p.F));
        for (std::int64_t j = 0; j < r.kept; ++j) {
          const double* v = p.v.at(b, j, hk);
          // num = sum_j w_j v_j, den = sum_j w_j + eps  ->  dw_j = v_j . dnum + dden,
          // dv_j += w_j dnum
          double dw = dden;
          for (std::int64_t c = 0; c < d.Dv; ++c) dw += v[c] * dnum[c];
          double* dv = p.dv.at(b, j, hk);
          for (std::int64_t c = 0; c < d.Dv; ++c) dv[c] += r.w[j] * dnum[c];
          // w_j = a . phi_i(k_j), a = phi(q_i)  ->  da += dw phi_i(k_j), dphi_i(k_j) = dw a
          const std::vector<double>& key = r.keys[static_cast<std::size_t>(j)];
          for (std::int64_t c = 0; c < p.F; ++c) {
            da[c] += dw * key[c];
            db[c] = dw * r.a[c];
          }
          phi.backward(p.k.at(b, j, hk), key, db, true, p.dk.at(b, j, hk));
        }
        double* dq = p.dq.at(b, i, h);
        std::fill_n(dq, d.D, 0.0);
        phi.backward(p.q.at(b, i, h), r.a, da, false, dq);
      }
    }
  }
}

}  // namespace qkv::kernels::reference
