// The reference backward against central finite differences of L = sum(out * G) in f64, for dq,
// dk, dv and dbias (broadcast shapes, whose gradient sums over the broadcast dimensions, and the
// full shape), over shapes and every option, dropout included (the same seed in every pass, so
// the mask is a constant of L), and everything composed. Rows that keep no key must have exactly
// zero gradients. Lower precisions are checked against the f64 gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/reference/oracle.hpp"

namespace qkv::testing {
namespace {

// Central differences have truncation error h^2 f'''/6 ~ 1e-12 and rounding error
// eps |L| / h ~ 1e-9 at h = 1e-6; the absolute floor covers the latter.
constexpr double kStep = 1e-6;
constexpr double kRtol = 1e-6;
constexpr double kAtol = 1e-8;

long double loss(const Problem& p) {
  const std::vector<double> out = attention_forward(p.q, p.k, p.v, p.options).out.to_vector();
  const std::vector<double> g = p.dout.to_vector();
  long double sum = 0;
  for (std::size_t n = 0; n < out.size(); ++n) sum += static_cast<long double>(out[n]) * g[n];
  return sum;
}

// dL/dx for every element of `x`, a tensor the problem reads (q, k, v or the bias, any view),
// perturbed in place and restored.
std::vector<long double> finite_differences(Problem& p, Tensor& x) {
  std::vector<long double> grad;
  for_each_index(x.shape(), [&](const Shape& index) {
    const double x0 = x.at(index);
    x.set(index, x0 + kStep);
    const long double up = loss(p);
    x.set(index, x0 - kStep);
    const long double down = loss(p);
    x.set(index, x0);
    grad.push_back((up - down) / (2 * kStep));
  });
  return grad;
}

std::vector<Case> gradcheck_cases() {
  std::vector<Case> cases;
  auto add = [&](auto&& edit) {
    Case c;
    c.B = 2, c.Tq = 4, c.Tk = 5, c.Hq = 2, c.Hk = 2, c.D = 3, c.Dv = 2;
    edit(c);
    c.seed = 100 + cases.size();
    cases.push_back(c);
  };
  add([](Case&) {});
  add([](Case& c) { c.B = 1, c.Tq = 1, c.Tk = 1; });
  add([](Case& c) { c.Tq = 7, c.Tk = 3, c.D = 5, c.Dv = 4; });
  for (const Causal causal : {Causal::top_left, Causal::bottom_right}) {
    add([&](Case& c) { c.causal = causal, c.Tq = 5, c.Tk = 5; });
    add([&](Case& c) { c.causal = causal, c.Tq = 3, c.Tk = 6; });
    add([&](Case& c) { c.causal = causal, c.Tq = 6, c.Tk = 3; });
  }
  add([](Case& c) { c.window = {1, 1}, c.Tq = 6, c.Tk = 6; });
  add([](Case& c) { c.window = {0, -1}, c.Tq = 3, c.Tk = 6; });
  add([](Case& c) { c.padding = true, c.B = 3, c.Tq = 4, c.Tk = 6; });
  add([](Case& c) { c.mask = Broadcast::b_tq_tk; });
  add([](Case& c) { c.mask = Broadcast::tk, c.Hq = 4, c.Hk = 1; });
  // dbias in each broadcast shape sums over the dimensions the bias was broadcast along.
  for (const Broadcast s : {Broadcast::tk, Broadcast::tq_tk, Broadcast::h_tq_tk, Broadcast::h_tk,
                            Broadcast::b_tq_tk, Broadcast::full}) {
    add([&](Case& c) { c.bias = s, c.Hq = 4, c.Hk = 2; });
  }
  add([](Case& c) { c.alibi = true, c.padding = true, c.Tq = 4, c.Tk = 6; });
  add([](Case& c) { c.softcap = 0.5; });
  add([](Case& c) { c.softcap = 1.0, c.bias = Broadcast::tq_tk, c.scale = 2.5; });
  add([](Case& c) { c.dropout = 0.3, c.Tq = 5, c.Tk = 6; });
  add([](Case& c) { c.dropout = 0.7, c.Hq = 4, c.Hk = 1; });
  add([](Case& c) { c.Hq = 4, c.Hk = 2, c.Tq = 3; });
  add([](Case& c) { c.Hq = 4, c.Hk = 1, c.Dv = 5; });
  add([](Case& c) { c.scale = -0.7; });
  add([](Case& c) { c.layout = Layout::permuted, c.bias = Broadcast::h_tk; });
  add([](Case& c) { c.layout = Layout::sliced, c.mask = Broadcast::full; });
  add([](Case& c) {
    c.B = 3, c.Tq = 5, c.Tk = 7, c.Hq = 4, c.Hk = 2, c.D = 3, c.Dv = 2;
    c.causal = Causal::bottom_right, c.window = {3, 1}, c.padding = true;
    c.mask = Broadcast::tq_tk, c.bias = Broadcast::b_tq_tk, c.alibi = true, c.softcap = 1.2;
    c.dropout = 0.2, c.scale = 0.8, c.layout = Layout::sliced;
  });
  add([](Case& c) {
    c.B = 2, c.Tq = 6, c.Tk = 4, c.Hq = 2, c.Hk = 1, c.D = 4, c.Dv = 3;
    c.causal = Causal::top_left, c.window = {1, -1}, c.padding = true;
    c.mask = Broadcast::full, c.bias = Broadcast::full, c.alibi = true, c.softcap = 0.7;
    c.dropout = 0.4, c.layout = Layout::permuted;
  });
  return cases;
}

class ReferenceGradcheck : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceGradcheck, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  Problem p = make_problem(c, DType::f64);
  SCOPED_TRACE(p.describe());
  const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
  const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, p.options);
  ASSERT_EQ(g.dq.shape(), p.q.shape());
  ASSERT_EQ(g.dk.shape(), p.k.shape());
  ASSERT_EQ(g.dv.shape(), p.v.shape());
  EXPECT_TRUE(all_close("dq", g.dq, finite_differences(p, p.q), kRtol, kAtol));
  EXPECT_TRUE(all_close("dk", g.dk, finite_differences(p, p.k), kRtol, kAtol));
  EXPECT_TRUE(all_close("dv", g.dv, finite_differences(p, p.v), kRtol, kAtol));
  if (c.bias != Broadcast::none) {
    ASSERT_TRUE(g.dbias.defined());
    EXPECT_EQ(g.dbias.shape(), p.options.bias.shape());
    EXPECT_EQ(g.dbias.dtype(), p.options.bias.dtype());
    EXPECT_TRUE(all_close("dbias", g.dbias, finite_differences(p, p.options.bias), kRtol, kAtol));
  } else {
    EXPECT_FALSE(g.dbias.defined());
  }
}

// The numerics require exactly zero gradients (not merely small) for rows that keep no key.
TEST_P(ReferenceGradcheck, RowsWithoutKeysHaveZeroGradient) {
  const Case& c = GetParam();
  const Problem p = make_problem(c, DType::f64);
  SCOPED_TRACE(p.describe());
  const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
  const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, p.options);
  const Dense ref = dense_attention(p.q, p.k, p.v, p.options);
  int empty_rows = 0;
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t h = 0; h < c.Hq; ++h) {
      for (std::int64_t i = 0; i < c.Tq; ++i) {
        if (!ref.row_empty(b, h, i)) continue;
        ++empty_rows;
        for (std::int64_t d = 0; d < c.D; ++d) {
          EXPECT_EQ(g.dq.at({b, i, h, d}), 0.0) << "b=" << b << " h=" << h << " i=" << i;
        }
      }
    }
  }
  // A key that no kept (b, h, i) attends to gets no gradient either.
  const std::int64_t group = c.Hq / c.Hk;
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t hk = 0; hk < c.Hk; ++hk) {
      for (std::int64_t j = 0; j < c.Tk; ++j) {
        bool seen = false;
        for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
          for (std::int64_t i = 0; i < c.Tq; ++i) seen = seen || ref.keep[ref.bhij(b, h, i, j)];
        }
        if (seen) continue;
        for (std::int64_t d = 0; d < c.D; ++d) EXPECT_EQ(g.dk.at({b, j, hk, d}), 0.0);
        for (std::int64_t d = 0; d < c.Dv; ++d) EXPECT_EQ(g.dv.at({b, j, hk, d}), 0.0);
      }
    }
  }
  RecordProperty("empty_rows", empty_rows);
}

// bf16/f16/f32 gradients, computed in f32 from rounded inputs, against the f64 gradients (which
// the finite differences vouch for) of the same rounded values. Their dtypes follow the inputs.
TEST_P(ReferenceGradcheck, LowPrecisionMatchesF64) {
  const Case& c = GetParam();
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const Problem p = make_problem(c, dtype);
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + p.describe());
    Problem wide = p;
    wide.q = p.q.to(DType::f64);
    wide.k = p.k.to(DType::f64);
    wide.v = p.v.to(DType::f64);
    wide.dout = p.dout.to(DType::f64);
    if (p.options.bias.defined()) wide.options.bias = p.options.bias.to(DType::f64);
    const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
    const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, p.options);
    const AttentionOutput fw = attention_forward(wide.q, wide.k, wide.v, wide.options);
    const AttentionGrads gw =
        attention_backward(wide.dout, wide.q, wide.k, wide.v, fw.out, fw.lse, wide.options);
    EXPECT_EQ(g.dq.dtype(), dtype);
    EXPECT_EQ(g.dk.dtype(), dtype);
    EXPECT_EQ(g.dv.dtype(), dtype);
    // The backward reads out in its storage dtype (D_i = dO_i . O_i), so the output's rounding
    // enters the gradients too: a few ulps of the storage type, relative to the problem's scale.
    const double ulp = dtype == DType::bf16 ? 0x1.0p-8 : dtype == DType::f16 ? 0x1.0p-10 : 1e-6;
    const double amplify = 1.0 / (1.0 - c.dropout);
    const double rtol = 4 * ulp * amplify;
    const double atol = 8 * ulp * amplify;
    EXPECT_TRUE(all_close("dq", g.dq, widen(gw.dq.to_vector()), rtol, atol));
    EXPECT_TRUE(all_close("dk", g.dk, widen(gw.dk.to_vector()), rtol, atol));
    EXPECT_TRUE(all_close("dv", g.dv, widen(gw.dv.to_vector()), rtol, atol));
    if (g.dbias.defined()) {
      EXPECT_EQ(g.dbias.dtype(), dtype);
      EXPECT_TRUE(all_close("dbias", g.dbias, widen(gw.dbias.to_vector()), rtol, atol));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, ReferenceGradcheck, ::testing::ValuesIn(gradcheck_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Random, ReferenceGradcheck,
                         ::testing::ValuesIn(random_cases(60, 11, 6, 4)), case_name);

// Soft-capping must reach the gradient of q and k through its derivative 1 - tanh^2: with a cap
// that bites, dq differs from the uncapped one, and equals the finite differences (above). Here
// the chain rule is checked in isolation on one key pair, against the closed form.
TEST(ReferenceGradcheckSoftcap, ChainRuleThroughTanh) {
  // One query, two keys, D = 1, scale 1: s_j = c tanh(q k_j / c); with dout = 1 and v = (0, 1),
  // L = P_1 and dL/dq = P_0 P_1 (ds_1/dq - ds_0/dq), ds_j/dq = k_j (1 - tanh^2(q k_j / c)).
  const double qv = 1.3, k0 = -0.4, k1 = 2.1, cap = 0.9;
  const Tensor q = Tensor::from_values({1, 1, 1, 1}, {qv}, DType::f64);
  const Tensor k = Tensor::from_values({1, 2, 1, 1}, {k0, k1}, DType::f64);
  const Tensor v = Tensor::from_values({1, 2, 1, 1}, {0.0, 1.0}, DType::f64);
  const Tensor dout = Tensor::from_values({1, 1, 1, 1}, {1.0}, DType::f64);
  AttentionOptions o;
  o.backend = Backend::reference;
  o.scale = 1.0;
  o.softcap = cap;
  SCOPED_TRACE(describe(o));
  const AttentionOutput f = attention_forward(q, k, v, o);
  const AttentionGrads g = attention_backward(dout, q, k, v, f.out, f.lse, o);
  const double t0 = std::tanh(qv * k0 / cap), t1 = std::tanh(qv * k1 / cap);
  const double s0 = cap * t0, s1 = cap * t1;
  const double p1 = 1.0 / (1.0 + std::exp(s0 - s1));
  const double p0 = 1.0 - p1;
  const double expected = p0 * p1 * (k1 * (1 - t1 * t1) - k0 * (1 - t0 * t0));
  EXPECT_NEAR(g.dq.at({0, 0, 0, 0}), expected, 1e-14);
  const double uncapped = p0 * p1 * (k1 - k0);
  EXPECT_GT(std::fabs(expected - uncapped), 0.1) << "the cap must bite for this test to mean much";
}

// The overload that writes into caller tensors (strided views here) gives the same bits, dbias in
// a broadcast shape included, from strided dout, out and lse.
TEST(ReferenceBackwardOverload, WritesSameGradientsIntoCallerTensors) {
  Case c;
  c.B = 2, c.Tq = 4, c.Tk = 6, c.Hq = 4, c.Hk = 2, c.D = 3, c.Dv = 5;
  c.bias = Broadcast::h_tk, c.causal = Causal::bottom_right, c.dropout = 0.2;
  const Problem p = make_problem(c, DType::f64);
  SCOPED_TRACE(p.describe());
  const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
  const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, p.options);
  AttentionGrads mine;
  mine.dq = Tensor::full({c.B, c.Hq, c.Tq, c.D}, 12345.0, DType::f64).permute({0, 2, 1, 3});
  mine.dk = Tensor::full({c.B, c.Hk, c.Tk, c.D}, 12345.0, DType::f64).permute({0, 2, 1, 3});
  mine.dv = Tensor::full({c.B, c.Tk, c.Hk, 2 * c.Dv}, 12345.0, DType::f64).slice(3, 0, 2 * c.Dv, 2);
  mine.dbias = Tensor::full({1, c.Hq, 1, c.Tk}, 12345.0, DType::f64);
  // dout, out and lse may be strided views too.
  Tensor dout = Tensor::zeros({c.B, c.Hq, c.Tq, c.Dv}, DType::f64).permute({0, 2, 1, 3});
  dout.copy_from(p.dout);
  Tensor out = Tensor::zeros({c.B, c.Tq + 2, c.Hq, c.Dv}, DType::f64).slice(1, 1, 1 + c.Tq);
  out.copy_from(f.out);
  Tensor lse = Tensor::zeros({c.Tq, c.B, c.Hq}, DType::f64).permute({1, 2, 0});
  lse.copy_from(f.lse);
  ASSERT_FALSE(dout.is_contiguous() || out.is_contiguous() || lse.is_contiguous());
  attention_backward(dout, p.q, p.k, p.v, out, lse, p.options, mine);
  EXPECT_EQ(mine.dq.to_vector(), g.dq.to_vector());
  EXPECT_EQ(mine.dk.to_vector(), g.dk.to_vector());
  EXPECT_EQ(mine.dv.to_vector(), g.dv.to_vector());
  EXPECT_EQ(mine.dbias.to_vector(), g.dbias.to_vector());
}

}  // namespace
}  // namespace qkv::testing
