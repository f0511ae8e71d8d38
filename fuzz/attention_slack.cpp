#include "attention_slack.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "dtype_limits.hpp"
#include "kernels/cpu/bf16_dots.hpp"
#include "kernels/cpu/bf16_gemm.hpp"
#include "qkv/philox.hpp"

namespace qkv::fuzz {
namespace {

double finite_abs(double x) { return std::isfinite(x) ? std::abs(x) : 0.0; }

std::int64_t count(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t size : shape) n *= size;
  return n;
}

// Element (b, h, i, j) of [B, Hq, Tq, Tk] in a row-major tensor of `shape` broadcast to it
// (dimensions aligned from the right, those of size 1 repeated).
class BroadcastIndex {
 public:
  explicit BroadcastIndex(const Shape& shape) {
    const auto lead = 4 - static_cast<std::int64_t>(shape.size());
    std::int64_t step = 1;
    for (auto d = static_cast<std::int64_t>(shape.size()) - 1; d >= 0; --d) {
      stride_[lead + d] = shape[d] == 1 ? 0 : step;
      step *= shape[d];
    }
  }
  std::int64_t operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return b * stride_[0] + h * stride_[1] + i * stride_[2] + j * stride_[3];
  }

 private:
  std::int64_t stride_[4] = {0, 0, 0, 0};
};

// The factor that turns the magnitudes of n-term sums into slack.
double slack_factor(std::int64_t n, DType compute) {
  return 4 * std::sqrt(static_cast<double>(std::max<std::int64_t>(n, 1))) * limits(compute).epsilon;
}

void multiply(std::vector<double>& values, double factor) {
  for (double& x : values) x *= factor;
}

// P [B, Hq, Tq, Tk] in f64 from the reference: attention_weights with the case's options, or
// flex_attention_weights with its mods.
std::vector<double> mods_weights(const AttentionCase& c, const AttentionOptions& exact_options) {
  const Tensor q = c.q.to(DType::f64), k = c.k.to(DType::f64);
  if (!c.mods) return attention_weights(q, k, exact_options).to_vector();
  return c.mods->build(true)
      .weights(q, k, flex_options(exact_options, Backend::reference))
      .to_vector();
}

// The dropout factor of pair (i, j) of row bh = b * Hq + h: 1 / (1 - p) kept, 0 dropped.
double dropout_factor(const AttentionOptions& o, std::int64_t bh, std::int64_t i, std::int64_t j) {
  if (o.dropout_p == 0) return 1.0;
  return dropout_keep(o.seed, o.offset, static_cast<std::uint32_t>(bh),
                      static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j), o.dropout_p)
             ? 1 / (1 - o.dropout_p)
             : 0.0;
}

// The largest |s'| after the score mod's steps for scores of magnitude at most A.
double mods_bound(const std::vector<ScoreStep>& steps, double A) {
  for (const ScoreStep& step : steps) {
    switch (step.kind) {
      case ScoreStep::multiply:
        A *= std::abs(step.value);
        break;
      case ScoreStep::cap:
        A = std::min(A, 2 * step.value);
        break;
      case ScoreStep::add:
        A += step.value;
        break;
    }
  }
  return A;
}

// Whether the fused run may take bf16 products: the case forced a matrix path, or its inputs are
// bf16 and the library picks one for Tk keys by itself (on a CPU with AMX, for any Tk:
// kernels/cpu/bf16_gemm.hpp, kAmxMinKeys). Without the second half, a bf16 case on such a CPU got
// no slack for P rounded to bf16 before P V: out 8% off where it cancels terms 100 times larger
// (a finding of the fixed-seed smoke run, 2026-11-27; PyTorch's bf16 SDPA gives the same value).
// Decode shapes of 4 query rows or more a k/v head take them wherever the CPU has AVX512-BF16
// (kernels/cpu/bf16_dots.hpp).
bool bf16_products(const AttentionCase& c, std::int64_t Tk) {
  kernels::cpu::MatrixPath path;
  if (c.matrix_path.has_value()) return true;
  if (c.dtype != DType::bf16) return false;
  kernels::Dims d;
  d.B = c.q.size(0);
  d.Tq = c.q.size(1);
  d.Hq = c.q.size(2);
  d.D = c.q.size(3);
  d.Tk = Tk;
  d.Hk = c.k.size(2);
  d.Dv = c.v.size(3);
  return kernels::cpu::fused_bf16_path(Tk, path) || kernels::cpu::decode_bf16_dots(d, path);
}

}  // namespace

Slack compute_slack(const AttentionCase& c, const AttentionOutput& forward, DType compute) {
  const std::int64_t B = c.q.size(0), Tq = c.q.size(1), Hq = c.q.size(2), D = c.q.size(3);
  const std::int64_t Tk = c.k.size(1), Hk = c.k.size(2), Dv = c.v.size(3), G = Hq / Hk;
  const AttentionOptions& o = c.options;
  AttentionOptions exact_options = o;
  exact_options.backend = Backend::reference;
  if (o.bias.defined()) exact_options.bias = o.bias.to(DType::f64);
  // P [B, Hq, Tq, Tk] before dropout, 0 where a key is dropped.
  const std::vector<double> P = mods_weights(c, exact_options);
  const std::vector<double> q = c.q.to_vector(), k = c.k.to_vector(), v = c.v.to_vector();
  const std::vector<double> dout = c.dout.to_vector();
  const std::vector<double> out = forward.out.to_vector(), lse = forward.lse.to_vector();
  const std::vector<double> bias = o.bias.defined() ? o.bias.to_vector() : std::vector<double>();
  const BroadcastIndex bias_at(o.bias.defined() ? o.bias.shape() : Shape{});
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  double slope = 0;
  for (const double s : o.alibi_slopes) slope = std::max(slope, std::abs(s));

  Slack m;
  m.out.assign(B * Tq * Hq * Dv, 0.0);
  m.lse.assign(B * Hq * Tq, 0.0);
  m.dq.assign(B * Tq * Hq * D, 0.0);
  m.dk.assign(B * Tk * Hk * D, 0.0);
  m.dv.assign(B * Tk * Hk * Dv, 0.0);
  m.dbias.assign(o.bias.defined() ? count(o.bias.shape()) : 0, 0.0);
  const bool table = c.mods && c.mods->table.defined();
  m.captured.assign(table ? count(c.mods->table.shape()) : 0, 0.0);
  m.captured_edge.assign(m.captured.size(), 0);
  const std::int64_t table_width = table ? c.mods->table.size(1) : 0;
  m.out_edge.assign(m.out.size(), 0);
  m.dq_edge.assign(m.dq.size(), 0);
  m.dk_edge.assign(m.dk.size(), 0);
  m.dv_edge.assign(m.dv.size(), 0);
  m.dbias_edge.assign(m.dbias.size(), 0);
  const auto all_finite = [](const double* x, std::int64_t n) {
    return std::all_of(x, x + n, [](double y) { return std::isfinite(y); });
  };
  const double edge = limits(compute).smallest_normal;
  // The number of terms a result sums, counted over the whole chain: the backward's dS reads
  // out, which carries the forward's rounding over Tk keys, and dQ, dK, dV sum over Tk keys or
  // G Tq rows of products over D or Dv; dbias sums the entries its broadcast folds.
  const std::int64_t terms = Tk + G * Tq + D + Dv;
  const std::int64_t bias_terms =
      o.bias.defined() ? B * Hq * Tq * Tk / std::max<std::int64_t>(count(o.bias.shape()), 1) : 0;
  const double factor = slack_factor(terms, compute);
  double mods_slope = 1;  // |ds'/ds| <= the product of the score mod's factors (caps: <= 1)
  for (const ScoreStep& step : c.mods ? c.mods->steps : std::vector<ScoreStep>()) {
    if (step.kind == ScoreStep::multiply) mods_slope *= std::abs(step.value);
  }
  // The table element pair (h, i, j) reads.
  const auto cell = [&](std::int64_t h, std::int64_t i, std::int64_t j) {
    return h * table_width + c.mods->buckets[static_cast<std::size_t>(j - i + Tq - 1)];
  };
  // A P_ij below the smallest normal may come out as 0 or as a subnormal, whatever its exact
  // value (the fused kernel's exp returns 0 there): each kept pair may lose that much of P.
  const double lost_p = 2 * limits(compute).smallest_normal / factor;
  std::vector<double> raw(Tk);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < Hq; ++h) {
      const std::int64_t hk = h / G;
      for (std::int64_t i = 0; i < Tq; ++i) {
        const std::int64_t row = (b * Tq + i) * Hq + h;  // of q, dout, out
        const double* qi = q.data() + row * D;
        const double* doi = dout.data() + row * Dv;
        const double* oi = out.data() + row * Dv;
        // A_i: the largest |s_ij| over the row's keys, kept or not.
        double A = 0, bias_max = 0;
        for (std::int64_t j = 0; j < Tk; ++j) {
          const double* kj = k.data() + ((b * Tk + j) * Hk + hk) * D;
          double dot = 0, dot_abs = 0;
          for (std::int64_t x = 0; x < D; ++x) {
            dot += qi[x] * kj[x];
            dot_abs += finite_abs(qi[x]) * finite_abs(kj[x]);
          }
          raw[j] = scale * dot;
          A = std::max(A, std::abs(scale) * dot_abs);
          if (!bias.empty()) bias_max = std::max(bias_max, finite_abs(bias[bias_at(b, h, i, j)]));
        }
        if (o.softcap > 0) A = std::min(A, 2 * o.softcap);
        A += bias_max + slope * static_cast<double>(Tq + Tk);
        if (c.mods) A = mods_bound(c.mods->steps, A);
        const double row_lse = finite_abs(lse[(b * Hq + h) * Tq + i]);
        m.lse[(b * Hq + h) * Tq + i] = 1 + A + row_lse;
        // P_ij = exp(s_ij - lse_i): the rounding of s_ij (eps A) and of the difference (eps
        // (|s_ij| + |lse_i|)) move it by that much relatively, the exp by an ulp or two.
        const double rounding_of_p = 2 + 2 * A + row_lse;

        double delta = 0;  // |dout_i| . |out_i|
        for (std::int64_t x = 0; x < Dv; ++x) delta += finite_abs(doi[x]) * finite_abs(oi[x]);
        const double* Pi = P.data() + ((b * Hq + h) * Tq + i) * Tk;
        // The backward's D_i = dout_i . out_i reads out_i as the forward computed it, off by up
        // to its slack: every dS_ij of the row inherits sum_c |dout_ic| times that, which
        // |dout_i| . |out_i| does not bound where out_i cancels terms far larger than itself
        // (an f64 case, softcap 20, dout_i of size 1e6: dk 1.27x that slack). So d_error sums
        // |dout_ic| times out_ic's magnitudes; and with bf16 products (bf16_products) the
        // forward rounds each P_ij to bf16 before P V, which moves out_ic by up to u sum_j P_ij
        // z_ij |v_jc| more (u = 2^-8 rounding to nearest; epsilon, 2^-7, allows for the
        // products' own f32 steps). Before the multiplication by `factor` below (u divided by
        // it).
        double d_error = 0;
        const double u = bf16_products(c, Tk) ? limits(DType::bf16).epsilon / factor : 0;
        for (std::int64_t j = 0; j < Tk; ++j) {
          if (!(Pi[j] > 0)) continue;
          const double z = dropout_factor(o, b * Hq + h, i, j);
          const double* vj = v.data() + ((b * Tk + j) * Hk + hk) * Dv;
          const double pr = rounding_of_p * Pi[j] + lost_p;
          for (std::int64_t x = 0; x < Dv; ++x) {
            const double moved = u * Pi[j] * z * finite_abs(vj[x]);
            m.out[row * Dv + x] += moved;
            d_error += finite_abs(doi[x]) * (moved + pr * z * finite_abs(vj[x]));
          }
        }
        const bool dout_finite = all_finite(doi, Dv);
        const bool out_finite = all_finite(oi, Dv);
        // Whether out_i may hold NaN in one backend and inf in the other: then so may the
        // backward's D_i = dout_i . out_i, and every gradient that reads it.
        bool out_edge = false;
        for (std::int64_t j = 0; j < Tk; ++j) {
          out_edge = out_edge || (Pi[j] > 0 && Pi[j] < edge &&
                                  !all_finite(v.data() + ((b * Tk + j) * Hk + hk) * Dv, Dv));
        }
        for (std::int64_t j = 0; j < Tk; ++j) {
          const double p = Pi[j];
          if (!(p > 0)) continue;  // dropped, or NaN (then every result it reaches is NaN)
          const double z = dropout_factor(o, b * Hq + h, i, j);
          const double pr = rounding_of_p * p + lost_p;
          const std::int64_t kv = (b * Tk + j) * Hk + hk;
          const double* kj = k.data() + kv * D;
          const double* vj = v.data() + kv * Dv;
          double dp = 0;  // |dout_i| . |v_j|
          const bool tiny = p < edge;
          for (std::int64_t x = 0; x < Dv; ++x) {
            m.out[row * Dv + x] += pr * z * finite_abs(vj[x]);
            // (+ u: the backward's bf16 products round P_ij z_ij to bf16 before dO^T (P Z))
            m.dv[kv * Dv + x] += (pr + u * p) * z * finite_abs(doi[x]);
            dp += finite_abs(doi[x]) * finite_abs(vj[x]);
            m.out_edge[row * Dv + x] |= static_cast<char>(tiny && !std::isfinite(vj[x]));
            m.dv_edge[kv * Dv + x] |= static_cast<char>(tiny && !std::isfinite(doi[x]));
          }
          // dS_ij = P_ij (dP_ij - D_i): a tiny P_ij against an infinite dP_ij or D_i (out_i
          // infinite through another key), or any P_ij against a D_i that may be NaN or inf.
          if (out_edge || (tiny && !(dout_finite && all_finite(vj, Dv) && out_finite))) {
            for (std::int64_t x = 0; x < D; ++x) {
              m.dq_edge[row * D + x] = 1;
              m.dk_edge[kv * D + x] = 1;
            }
            if (!m.dbias.empty()) m.dbias_edge[bias_at(b, h, i, j)] = 1;
            if (table) m.captured_edge[cell(h, i, j)] = 1;
          }
          const double ds = pr * (z * dp + delta) + p * d_error;
          if (!m.dbias.empty()) m.dbias[bias_at(b, h, i, j)] += ds;
          if (table) m.captured[cell(h, i, j)] += ds;
          // d(softcap)/ds = 1 - tanh^2, at least 1/64: both backends compute it as (1 - t)(1 +
          // t), but t itself carries an absolute error of ~eps, which the slope's own size would
          // not cover where it is tiny.
          double slope_of_cap = c.mods ? mods_slope : 1;
          if (o.softcap > 0 && std::isfinite(raw[j])) {
            const double t = std::tanh(raw[j] / o.softcap);
            slope_of_cap = std::max(1 - t * t, 1.0 / 64);
            // A dS_ij that may be infinite (dout_i, v_j or out_i not finite) times a slope that
            // rounds to 0 in one backend and not in the other: inf * 0 is NaN. (An f32 case:
            // softcap 1, dout_i0 = inf, dS_ij = -inf: dk NaN fused, inf in the reference.)
            if (1 - t * t < 4 * limits(compute).epsilon &&
                !(dout_finite && all_finite(vj, Dv) && out_finite)) {
              for (std::int64_t x = 0; x < D; ++x) {
                m.dq_edge[row * D + x] = 1;
                m.dk_edge[kv * D + x] = 1;
              }
              if (!m.dbias.empty()) m.dbias_edge[bias_at(b, h, i, j)] = 1;
              if (table) m.captured_edge[cell(h, i, j)] = 1;
            }
          }
          // (the backward's bf16 products round dS_ij to bf16 before dS K and dS^T Q)
          const double g = std::abs(scale) * (ds + u * p * (z * dp + delta)) * slope_of_cap;
          for (std::int64_t x = 0; x < D; ++x) {
            m.dq[row * D + x] += g * finite_abs(kj[x]);
            m.dk[kv * D + x] += g * finite_abs(qi[x]);
          }
        }
      }
    }
  }
  for (std::vector<double>* magnitudes : {&m.out, &m.lse, &m.dq, &m.dk, &m.dv}) {
    multiply(*magnitudes, factor);
  }
  multiply(m.dbias, slack_factor(terms + bias_terms, compute));
  // An element of the table sums over up to B Tq Tk pairs.
  multiply(m.captured, slack_factor(terms + B * Tq * Tk, compute));
  return m;
}

}  // namespace qkv::fuzz
