// Linear attention evaluated as its formula reads, in f64 (linear_ref.hpp).
#include "kernels/reference/linear_ref.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace qkv::kernels::reference {
namespace {

// Row i of head h of batch b: a = phi(q_i) [D], the weights w [Tk] of its kept keys (the first
// `kept`), num = sum_j w_j v_j [Dv] and den = sum_j w_j + eps.
struct LinearRow {
  std::vector<double> a, w, num;
  double den = 0;
  std::int64_t kept = 0;
};

LinearRow linear_row(const LinearParams<double>& p, std::int64_t b, std::int64_t h,
                     std::int64_t i) {
  const Dims& d = p.dims;
  const std::int64_t hk = h / d.group();
  LinearRow r;
  r.kept = p.visible_end(b, i);
  r.a.resize(static_cast<std::size_t>(d.D));
  const double* q = p.q.at(b, i, h);
  for (std::int64_t c = 0; c < d.D; ++c) r.a[c] = elu_feature(q[c]);
  r.w.assign(static_cast<std::size_t>(r.kept), 0.0);
  r.num.assign(static_cast<std::size_t>(d.Dv), 0.0);
  double sum = 0;
  for (std::int64_t j = 0; j < r.kept; ++j) {
    const double* k = p.k.at(b, j, hk);
    double w = 0;
    for (std::int64_t c = 0; c < d.D; ++c) w += r.a[c] * elu_feature(k[c]);
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
        std::vector<double> da(static_cast<std::size_t>(d.D), 0.0);
        for (std::int64_t j = 0; j < r.kept; ++j) {
          const double* k = p.k.at(b, j, hk);
          const double* v = p.v.at(b, j, hk);
          // num = sum_j w_j v_j, den = sum_j w_j + eps  ->  dw_j = v_j . dnum + dden,
          // dv_j += w_j dnum
          double dw = dden;
          for (std::int64_t c = 0; c < d.Dv; ++c) dw += v[c] * dnum[c];
          double* dv = p.dv.at(b, j, hk);
          for (std::int64_t c = 0; c < d.Dv; ++c) dv[c] += r.w[j] * dnum[c];
          // w_j = a . phi(k_j), a = phi(q_i)  ->  da += dw phi(k_j), dk_j += dw a phi'(k_j)
          double* dk = p.dk.at(b, j, hk);
          for (std::int64_t c = 0; c < d.D; ++c) {
            da[c] += dw * elu_feature(k[c]);
            dk[c] += dw * r.a[c] * elu_feature_slope(k[c]);
          }
        }
        const double* q = p.q.at(b, i, h);
        double* dq = p.dq.at(b, i, h);
        for (std::int64_t c = 0; c < d.D; ++c) dq[c] = da[c] * elu_feature_slope(q[c]);
      }
    }
  }
}

}  // namespace qkv::kernels::reference
