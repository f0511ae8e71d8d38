// Soft-capping at large scores in f32, against FlashAttention's accuracy rule: for out, dq, dk and
// dv, the error against the f64 reference is at most 3x the error of the same math done naively in
// f32 (as PyTorch's composed ops do it, written out below), plus one f32 rounding of the largest
// value. Checked for the fused kernel, the reference backend in f32 and the autodiff engine's
// composed ops, over softcap 5, 30 and 50, q scaled so that raw scores reach about 10x the cap (as
// FlashAttention's own test multiplies q by the softcap), D from 32 to 256, with ALiBi, windows,
// GQA and MQA.
//
// Before the fixes (docs/numerics.md, "Soft-capping at large scores") three of these cases failed:
// the fused dq at 5.8x (softcap 30, ALiBi), the fused dq and dk at 4.8x and 4.6x (softcap 30, a
// window of 16, where each row puts its weight on few keys and dS_ij = P_ij (dP_ij - D_i)
// cancels), the reference's dq and dk at 7.4x and 8.9x (softcap 50, ALiBi, a window, MQA, where
// its rows of P did not sum to 1). Now the largest ratio here is 2.7 (reference dq) and 2.5 (fused
// dq), both in the softcap 50 ALiBi case, where the naive f32 error happens to be small.
//
// The ratio of two max errors is noisy where one element dominates them (one large q_i against one
// key): over 300 random problems of this sweep (1200 outputs) the fused kernel's ratio has median
// 0.84, 95th percentile 1.25-1.47 by output and one outlier at 3.5, the reference's at 3.5 and 3.0;
// the cases here are fixed, so the test is deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <qkv/qkv.hpp>
#include <string>
#include <utility>
#include <vector>

namespace qkv::testing {
namespace {

struct SoftcapCase {
  std::int64_t B = 1, T = 64, Hq = 4, Hk = 4, D = 64;
  double softcap = 50;
  double q_scale = 2;        // q = randn * q_scale * softcap: raw scores up to 8-10 softcap
  bool alibi = false;        // slopes 1/2, 1/4, ... by head
  std::int64_t window = -1;  // keys j with |i - j| <= window; -1 = all
  std::uint64_t seed = 1;
  bool composed = false;  // also check autograd::attention_decomposed

  std::string name() const {
    std::string s;
    for (const auto& [label, value] :
         {std::pair{"B", B}, std::pair{"_T", T}, std::pair{"_Hq", Hq}, std::pair{"_Hk", Hk},
          std::pair{"_D", D}, std::pair{"_softcap", static_cast<std::int64_t>(softcap)},
          std::pair{"_q", static_cast<std::int64_t>(q_scale)}}) {
      s.append(label).append(std::to_string(value));
    }
    s += "c";
    if (alibi) s += "_alibi";
    if (window >= 0) s.append("_window").append(std::to_string(window));
    return s.append("_seed").append(std::to_string(seed));
  }
};

void PrintTo(const SoftcapCase& c, std::ostream* os) { *os << c.name(); }

struct Inputs {
  Tensor q, k, v, dout;  // f32: q [B, T, Hq, D], k and v [B, T, Hk, D], dout [B, T, Hq, D]
  AttentionOptions options;
};

// Random inputs of the case (f64 draws rounded to f32), and its options.
Inputs make_inputs(const SoftcapCase& c) {
  Generator g(c.seed);
  Inputs in;
  std::vector<double> q = Tensor::randn({c.B, c.T, c.Hq, c.D}, g, DType::f64).to_vector();
  for (double& x : q) x *= c.q_scale * c.softcap;
  in.q = Tensor::from_values({c.B, c.T, c.Hq, c.D}, q, DType::f32);
  in.k = Tensor::randn({c.B, c.T, c.Hk, c.D}, g, DType::f64).to(DType::f32);
  in.v = Tensor::randn({c.B, c.T, c.Hk, c.D}, g, DType::f64).to(DType::f32);
  in.dout = Tensor::randn({c.B, c.T, c.Hq, c.D}, g, DType::f64).to(DType::f32);
  in.options.softcap = c.softcap;
  if (c.alibi) {
    for (std::int64_t h = 0; h < c.Hq; ++h)
      in.options.alibi_slopes.push_back(std::ldexp(1.0, -1 - h));
  }
  if (c.window >= 0) in.options.window = {c.window, c.window};
  return in;
}

// Flattened out [B, T, Hq, D], dq [B, T, Hq, D], dk and dv [B, T, Hk, D].
struct Results {
  std::vector<double> out, dq, dk, dv;
};

// in's tensors (shapes in Inputs) converted to dtype, through one backend's forward and backward.
Results run(const Inputs& in, Backend backend, DType dtype) {
  AttentionOptions options = in.options;
  options.backend = backend;
  const Tensor q = in.q.to(dtype), k = in.k.to(dtype), v = in.v.to(dtype);
  const AttentionOutput f = attention_forward(q, k, v, options);
  const AttentionGrads g = attention_backward(in.dout.to(dtype), q, k, v, f.out, f.lse, options);
  return {f.out.to_vector(), g.dq.to_vector(), g.dk.to_vector(), g.dv.to_vector()};
}

// in's f32 tensors through autograd::attention_decomposed and the engine's backward.
Results run_composed(const Inputs& in) {
  namespace ag = autograd;
  const ag::Var q(in.q, true), k(in.k, true), v(in.v, true);
  const ag::Var out = ag::attention_decomposed(q, k, v, in.options);
  out.backward(in.dout);
  return {out.value().to_vector(), q.grad().to_vector(), k.grad().to_vector(),
          v.grad().to_vector()};
}

// The same math done naively in f32, the way PyTorch's composed ops and their autograd do it:
// S = (Q K^T) * scale materialized; t = tanh(S / c); S' = c t (- ALiBi); masked to -inf; P =
// softmax(S') (max subtracted, divided by the sum); out = P V. Backward: dV = P^T dO; dP = dO V^T;
// dS' = P * (dP - rowsum(dP * P)) (softmax's backward); dS = ((dS' * c) * (1 - t * t)) / c * scale;
// dQ = dS K; dK = dS^T Q. Every sum in f32, in index order. in's tensors as in Inputs.
Results naive_f32(const SoftcapCase& c, const Inputs& in) {
  const std::int64_t T = c.T, D = c.D;
  const std::vector<double> q64 = in.q.to_vector(), k64 = in.k.to_vector(), v64 = in.v.to_vector(),
                            do64 = in.dout.to_vector();
  const std::vector<float> q(q64.begin(), q64.end()), k(k64.begin(), k64.end()),
      v(v64.begin(), v64.end()), dout(do64.begin(), do64.end());
  std::vector<float> out(q.size(), 0.0f), dq(q.size(), 0.0f), dk(k.size(), 0.0f),
      dv(v.size(), 0.0f);
  const float cap = static_cast<float>(c.softcap);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> t(T * T), P(T * T), dP(T * T);
  std::vector<char> kept(T * T);
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t h = 0; h < c.Hq; ++h) {
      const std::int64_t hk = h / (c.Hq / c.Hk);
      const auto Q = [&](std::int64_t i) { return &q[((b * T + i) * c.Hq + h) * D]; };
      const auto K = [&](std::int64_t j) { return &k[((b * T + j) * c.Hk + hk) * D]; };
      const auto V = [&](std::int64_t j) { return &v[((b * T + j) * c.Hk + hk) * D]; };
      const auto dO = [&](std::int64_t i) { return &dout[((b * T + i) * c.Hq + h) * D]; };
      for (std::int64_t i = 0; i < T; ++i) {
        float* p = &P[i * T];
        float m = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j < T; ++j) {
          float raw = 0;
          for (std::int64_t x = 0; x < D; ++x) raw += Q(i)[x] * K(j)[x];
          t[i * T + j] = std::tanh(raw * scale / cap);
          p[j] = cap * t[i * T + j];
          if (c.alibi) {
            p[j] -=
                std::ldexp(1.0f, static_cast<int>(-1 - h)) * static_cast<float>(std::abs(i - j));
          }
          kept[i * T + j] = c.window < 0 || std::abs(i - j) <= c.window;
          if (!kept[i * T + j]) p[j] = -std::numeric_limits<float>::infinity();
          m = std::max(m, p[j]);
        }
        float sum = 0;
        for (std::int64_t j = 0; j < T; ++j) sum += p[j] = std::exp(p[j] - m);
        for (std::int64_t j = 0; j < T; ++j) p[j] /= sum;
        float* o = &out[((b * T + i) * c.Hq + h) * D];
        for (std::int64_t j = 0; j < T; ++j) {
          for (std::int64_t x = 0; x < D; ++x) o[x] += p[j] * V(j)[x];
        }
      }
      for (std::int64_t i = 0; i < T; ++i) {
        float row_sum = 0;  // rowsum(dP * P)
        for (std::int64_t j = 0; j < T; ++j) {
          float d = 0;
          for (std::int64_t x = 0; x < D; ++x) d += dO(i)[x] * V(j)[x];
          dP[i * T + j] = d;
          row_sum += d * P[i * T + j];
          float* dvj = &dv[((b * T + j) * c.Hk + hk) * D];
          for (std::int64_t x = 0; x < D; ++x) dvj[x] += P[i * T + j] * dO(i)[x];
        }
        for (std::int64_t j = 0; j < T; ++j) {
          if (!kept[i * T + j]) continue;
          const float tij = t[i * T + j];
          const float ds =
              P[i * T + j] * (dP[i * T + j] - row_sum) * cap * (1 - tij * tij) / cap * scale;
          float* dqi = &dq[((b * T + i) * c.Hq + h) * D];
          float* dkj = &dk[((b * T + j) * c.Hk + hk) * D];
          for (std::int64_t x = 0; x < D; ++x) {
            dqi[x] += ds * K(j)[x];
            dkj[x] += ds * Q(i)[x];
          }
        }
      }
    }
  }
  const auto wide = [](const std::vector<float>& x) {
    return std::vector<double>(x.begin(), x.end());
  };
  return {wide(out), wide(dq), wide(dk), wide(dv)};
}

// got, truth [n] -> max |got - truth|.
double max_error(const std::vector<double>& got, const std::vector<double>& truth) {
  double worst = 0;
  for (std::size_t n = 0; n < truth.size(); ++n)
    worst = std::max(worst, std::fabs(got[n] - truth[n]));
  return worst;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (const double e : x) m = std::max(m, std::fabs(e));
  return m;
}

struct Named {
  const char* name;
  std::vector<double> Results::*field;
};
constexpr Named kOutputs[] = {
    {"out", &Results::out}, {"dq", &Results::dq}, {"dk", &Results::dk}, {"dv", &Results::dv}};

// FlashAttention's rule for every output of `got`, one f32 rounding of the largest value (2^-24
// of it) as the absolute term.
void expect_rule(const char* who, const Results& got, const Results& naive, const Results& truth) {
  for (const Named& o : kOutputs) {
    const double err = max_error(got.*o.field, truth.*o.field);
    const double naive_err = max_error(naive.*o.field, truth.*o.field);
    const double floor = std::ldexp(max_abs(truth.*o.field), -24);
    EXPECT_LE(err, 3 * naive_err + floor)
        << who << " " << o.name << ": f32 error " << err << " = " << err / naive_err
        << "x the naive f32 error " << naive_err;
  }
}

class SoftcapAccuracy : public ::testing::TestWithParam<SoftcapCase> {};

TEST_P(SoftcapAccuracy, F32WithinThreeTimesNaiveF32) {
  const SoftcapCase& c = GetParam();
  const Inputs in = make_inputs(c);
  const Results truth = run(in, Backend::reference, DType::f64);
  const Results naive = naive_f32(c, in);
  expect_rule("fused", run(in, Backend::cpu, DType::f32), naive, truth);
  expect_rule("reference", run(in, Backend::reference, DType::f32), naive, truth);
  if (c.composed) expect_rule("composed", run_composed(in), naive, truth);
}

std::vector<SoftcapCase> cases() {
  std::vector<SoftcapCase> all;
  const auto add = [&](double softcap, std::int64_t D, auto&& edit) {
    SoftcapCase c;
    c.softcap = softcap;
    c.D = D;
    edit(c);
    all.push_back(c);
  };
  const auto plain = [](SoftcapCase&) {};
  const auto alibi = [](SoftcapCase& c) { c.alibi = true; };
  const auto window = [](SoftcapCase& c) { c.window = 16; };
  const auto gqa = [](SoftcapCase& c) { c.Hk = 2; };
  const auto everything = [](SoftcapCase& c) { c.alibi = true, c.window = 16, c.Hk = 1; };
  for (const double softcap : {5.0, 30.0, 50.0}) {
    add(softcap, 32, plain);
    add(softcap, 64, alibi);
    add(softcap, 128, window);
    add(softcap, 256, gqa);
    add(softcap, 64, everything);
  }
  // Scores up to 5x the cap rather than 10x, and two batches.
  add(50.0, 128, [](SoftcapCase& c) { c.q_scale = 1, c.B = 2, c.composed = true; });
  // Where dS cancelled before the fix (see the top of the file).
  add(30.0, 64, [](SoftcapCase& c) { c.T = 128, c.window = 16, c.seed = 2, c.composed = true; });
  add(50.0, 64,
      [](SoftcapCase& c) { c.T = 128, c.alibi = true, c.window = 16, c.Hk = 1, c.seed = 3; });
  return all;
}

INSTANTIATE_TEST_SUITE_P(Sweep, SoftcapAccuracy, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace qkv::testing
