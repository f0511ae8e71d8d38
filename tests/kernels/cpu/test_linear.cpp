// Linear attention: the chunked kernel against the direct f64 evaluation of the formula, forward
// and backward, for every causal rule, Tq != Tk, GQA, key lengths, Dv != D and lengths that no
// chunk divides, in f64 and f32; permuted views read in place; the same bits on any thread count;
// rows that keep no key; and the arguments it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/cpu/expect_error.hpp"
#include "kernels/cpu/finite_differences.hpp"
#include "qkv/linear_attention.hpp"
#include "qkv/philox.hpp"
#include "qkv/system.hpp"

namespace qkv::testing {
namespace {

struct LinearCase {
  std::int64_t B, Tq, Tk, Hq, Hk, D, Dv;
  Causal causal;
  std::vector<std::int64_t> key_lengths;

  std::string name() const {
    std::string s;
    const char* sizes[] = {"B", "_Tq", "_Tk", "_Hq", "_Hk", "_D", "_Dv"};
    const std::int64_t values[] = {B, Tq, Tk, Hq, Hk, D, Dv};
    for (int n = 0; n < 7; ++n) s.append(sizes[n]).append(std::to_string(values[n]));
    s.append(causal == Causal::none       ? "_full"
             : causal == Causal::top_left ? "_causal"
                                          : "_bottom_right");
    if (!key_lengths.empty()) s += "_lengths";
    return s;
  }
};

void PrintTo(const LinearCase& c, std::ostream* os) { *os << c.name(); }

struct LinearInputs {
  Tensor q, k, v, dout;
  LinearOptions options;
};

LinearInputs make_inputs(const LinearCase& c, DType dtype, std::uint64_t seed) {
  Generator g(seed);
  LinearInputs in;
  in.q = Tensor::randn({c.B, c.Tq, c.Hq, c.D}, g, DType::f64).to(dtype);
  in.k = Tensor::randn({c.B, c.Tk, c.Hk, c.D}, g, DType::f64).to(dtype);
  in.v = Tensor::randn({c.B, c.Tk, c.Hk, c.Dv}, g, DType::f64).to(dtype);
  in.dout = Tensor::randn({c.B, c.Tq, c.Hq, c.Dv}, g, DType::f64).to(dtype);
  in.options.causal = c.causal;
  in.options.key_lengths = c.key_lengths;
  return in;
}

// max |a - b| / max(1, max |b|)
double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double scale = 1, worst = 0;
  for (const double v : y) scale = std::max(scale, std::fabs(v));
  for (std::size_t n = 0; n < x.size(); ++n) {
    const double d = std::fabs(x[n] - y[n]);
    worst = std::max(worst, std::isnan(d) ? INFINITY : d);
  }
  return worst / scale;
}

const std::vector<LinearCase>& cases() {
  static const std::vector<LinearCase> all = {
      {2, 150, 150, 2, 2, 16, 16, Causal::none, {}},
      {2, 150, 150, 2, 2, 16, 16, Causal::top_left, {}},
      {1, 200, 200, 4, 2, 8, 12, Causal::top_left, {}},           // GQA, Dv != D
      {2, 70, 130, 2, 1, 8, 8, Causal::bottom_right, {130, 90}},  // Tq < Tk, lengths
      {2, 130, 70, 2, 2, 8, 8, Causal::bottom_right, {}},         // Tq > Tk: rows with no key
      {2, 97, 64, 3, 1, 5, 7, Causal::none, {64, 0}},             // a batch with no key
      {1, 129, 129, 1, 1, 4, 4, Causal::top_left, {100}},         // length inside the band
      {1, 1, 300, 2, 2, 8, 8, Causal::bottom_right, {}},          // one query (decoding)
  };
  return all;
}

class LinearVsReference : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearVsReference, ForwardAndBackwardMatchTheDirectFormula) {
  const LinearCase& c = GetParam();
  for (const DType dtype : {DType::f64, DType::f32}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    LinearInputs in = make_inputs(c, dtype, 11);
    LinearOptions reference = in.options;
    reference.backend = Backend::reference;
    // The reference on the same values in f64.
    const Tensor q = in.q.to(DType::f64), k = in.k.to(DType::f64), v = in.v.to(DType::f64),
                 dout = in.dout.to(DType::f64);
    const Tensor want = linear_attention(q, k, v, reference);
    const LinearGrads want_g = linear_attention_backward(dout, q, k, v, reference);
    const Tensor got = linear_attention(in.q, in.k, in.v, in.options);
    const LinearGrads got_g = linear_attention_backward(in.dout, in.q, in.k, in.v, in.options);
    EXPECT_EQ(got.dtype(), dtype);
    EXPECT_EQ(got_g.dk.dtype(), dtype);
    const double tolerance = dtype == DType::f64 ? 1e-12 : 2e-5;
    EXPECT_LT(relative_difference(got, want), tolerance) << "out";
    EXPECT_LT(relative_difference(got_g.dq, want_g.dq), tolerance) << "dq";
    EXPECT_LT(relative_difference(got_g.dk, want_g.dk), tolerance) << "dk";
    EXPECT_LT(relative_difference(got_g.dv, want_g.dv), tolerance) << "dv";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LinearVsReference, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name(); });

// The reference's backward, the oracle of the kernel's, against central differences of its own
// forward (and so is the kernel's, through the cases above).
TEST(Linear, ReferenceGradientsMatchFiniteDifferences) {
  for (const LinearCase& c : {LinearCase{2, 9, 9, 2, 1, 3, 4, Causal::top_left, {9, 6}},
                              LinearCase{1, 5, 8, 2, 2, 3, 2, Causal::bottom_right, {}},
                              LinearCase{1, 6, 7, 1, 1, 4, 3, Causal::none, {5}}}) {
    SCOPED_TRACE(c.name());
    LinearInputs in = make_inputs(c, DType::f64, 15);
    in.options.backend = Backend::reference;
    const LinearGrads g = linear_attention_backward(in.dout, in.q, in.k, in.v, in.options);
    expect_finite_differences(
        [&](const Tensor& q, const Tensor& k, const Tensor& v) {
          return linear_attention(q, k, v, in.options);
        },
        in.dout, {in.q, in.k, in.v}, {g.dq, g.dk, g.dv}, 1, 1e-7);
  }
}

TEST(Linear, SameBitsOnAnyThreadCountAndFromPermutedViews) {
  const LinearCase c{2, 150, 150, 4, 2, 16, 16, Causal::top_left, {150, 111}};
  const LinearInputs in = make_inputs(c, DType::f32, 12);
  const int threads = num_threads();
  set_num_threads(1);
  const Tensor one = linear_attention(in.q, in.k, in.v, in.options);
  const LinearGrads one_g = linear_attention_backward(in.dout, in.q, in.k, in.v, in.options);
  set_num_threads(3);
  const Tensor three = linear_attention(in.q, in.k, in.v, in.options);
  const LinearGrads three_g = linear_attention_backward(in.dout, in.q, in.k, in.v, in.options);
  set_num_threads(threads);
  EXPECT_EQ(one.to_vector(), three.to_vector());
  EXPECT_EQ(one_g.dq.to_vector(), three_g.dq.to_vector());
  EXPECT_EQ(one_g.dk.to_vector(), three_g.dk.to_vector());
  EXPECT_EQ(one_g.dv.to_vector(), three_g.dv.to_vector());
  // [B, H, T, D] tensors permuted to [B, T, H, D]: the same bits as contiguous inputs.
  const auto heads_first = [](const Tensor& t) { return t.permute({0, 2, 1, 3}).contiguous(); };
  const auto view = [](const Tensor& t) { return t.permute({0, 2, 1, 3}); };
  const Tensor q = view(heads_first(in.q)), k = view(heads_first(in.k)),
               v = view(heads_first(in.v));
  EXPECT_FALSE(q.is_contiguous());
  EXPECT_EQ(linear_attention(q, k, v, in.options).to_vector(), one.to_vector());
}

// Every key equal: every weight of a row is the same, so out is that key's value scaled by
// n w / (n w + eps), and with lengths 0 or rows before the first key, 0 with zero gradients.
TEST(Linear, EqualKeysGiveTheirValueAndEmptyRowsGiveZero) {
  const std::int64_t T = 90, D = 6;
  Generator g(13);
  const Tensor q = Tensor::randn({1, T, 1, D}, g, DType::f64);
  const Tensor key = Tensor::randn({1, 1, 1, D}, g, DType::f64);
  const Tensor value = Tensor::randn({1, 1, 1, 3}, g, DType::f64);
  const Tensor k = key.expand({1, T, 1, D}).contiguous(),
               v = value.expand({1, T, 1, 3}).contiguous();
  LinearOptions o;
  o.causal = Causal::top_left;
  o.eps = 1e-300;  // negligible against the weights
  const Tensor out = linear_attention(q, k, v, o);
  for (std::int64_t i = 0; i < T; ++i) {
    for (std::int64_t c = 0; c < 3; ++c) {
      EXPECT_NEAR(out.at({0, i, 0, c}), value.at({0, 0, 0, c}), 1e-13) << i;
    }
  }
  o.key_lengths = {0};
  const Tensor none = linear_attention(q, k, v, o);
  for (const double x : none.to_vector()) EXPECT_EQ(x, 0.0);
  const LinearGrads zero =
      linear_attention_backward(Tensor::full({1, T, 1, 3}, 1.0, DType::f64), q, k, v, o);
  for (const double x : zero.dq.to_vector()) EXPECT_EQ(x, 0.0);
  for (const double x : zero.dk.to_vector()) EXPECT_EQ(x, 0.0);
}

// The recurrent form, step by step, gives the rows of the causal parallel form (GQA, f32 and f64,
// a strided q), and refuses what does not fit its state without changing it.
TEST(Linear, RecurrentStepsEqualTheCausalForm) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    const LinearInputs in = make_inputs({2, 150, 150, 4, 2, 6, 5, Causal::top_left, {}}, dtype, 16);
    const Tensor whole = linear_attention(in.q, in.k, in.v, in.options);
    LinearState state(2, 2, 6, 5);
    for (std::int64_t t = 0; t < 150; ++t) {
      const Tensor out =
          state.step(in.q.slice(1, t, t + 1), in.k.slice(1, t, t + 1), in.v.slice(1, t, t + 1));
      EXPECT_EQ(out.dtype(), dtype);
      EXPECT_LT(relative_difference(out, whole.slice(1, t, t + 1)),
                dtype == DType::f64 ? 1e-12 : 2e-5)
          << t;
    }
    EXPECT_EQ(state.length(), 150);
    const Tensor k1 = in.k.slice(1, 0, 1), v1 = in.v.slice(1, 0, 1);
    expect_error([&] { state.step(in.q.slice(1, 0, 1).slice(2, 0, 3), k1, v1); }, "q");
    expect_error([&] { state.step(in.q.slice(1, 0, 1), k1.slice(3, 0, 2), v1); }, "k");
    expect_error([&] { state.step(in.q.slice(1, 0, 2), k1, v1); }, "q");
    EXPECT_EQ(state.length(), 150);
  }
  expect_error([] { LinearState(1, 0, 4, 4); }, "Hk");
  expect_error([] { LinearState(1, 1, 4, 4, 0.0); }, "eps");
}

TEST(Linear, RefusesBadArguments) {
  const LinearInputs in = make_inputs({1, 4, 4, 2, 2, 4, 4, Causal::none, {}}, DType::f32, 14);
  expect_error([&] { linear_attention(in.q.to(DType::bf16), in.k, in.v); }, "q");
  expect_error([&] { linear_attention(in.q, in.k.to(DType::f64), in.v); }, "k");
  expect_error([&] { linear_attention(in.q, in.k.slice(3, 0, 2), in.v); }, "k");
  LinearOptions o;
  o.key_lengths = {5};
  expect_error([&] { linear_attention(in.q, in.k, in.v, o); }, "options.key_lengths");
  for (const double eps : {0.0, -1.0, double(NAN), double(INFINITY), 1e300}) {
    LinearOptions bad;
    bad.eps = eps;  // 1e300: finite in f64, not in the f32 the kernel computes in
    expect_error([&] { linear_attention(in.q, in.k, in.v, bad); }, "options.eps");
  }
  expect_error([&] { linear_attention_backward(in.dout.slice(1, 0, 2), in.q, in.k, in.v); },
               "dout");
}

}  // namespace
}  // namespace qkv::testing
