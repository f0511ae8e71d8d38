// Linear attention: the chunked kernel against the direct f64 evaluation of the formula, forward
// and backward, for both feature maps (elu + 1 and FAVOR+), every causal rule, Tq != Tk, GQA, key
// lengths, Dv != D and lengths that no chunk divides, in f64 and f32; permuted views read in
// place; the same bits on any thread count; rows that keep no key; the recurrent form; FAVOR+'s
// features, its stabilizers on large inputs and its estimate of softmax attention as F grows; and
// the arguments it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/cpu/expect_error.hpp"
#include "kernels/cpu/finite_differences.hpp"
#include "qkv/attention.hpp"
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

// x [B, T, H, D] with each element of position t multiplied by factor(t), in x's dtype.
Tensor scale_positions(const Tensor& x, const std::function<double(std::int64_t)>& factor) {
  std::vector<double> values = x.to_vector();
  const std::int64_t per_position = x.size(2) * x.size(3);
  for (std::size_t n = 0; n < values.size(); ++n) {
    values[n] *= factor(static_cast<std::int64_t>(n) / per_position % x.size(1));
  }
  return Tensor::from_values(x.shape(), values, x.dtype());
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
  for (const auto& [map, dtype] :
       {std::pair{FeatureMap::elu, DType::f64}, std::pair{FeatureMap::elu, DType::f32},
        std::pair{FeatureMap::favor, DType::f64}, std::pair{FeatureMap::favor, DType::f32}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + (map == FeatureMap::favor ? " favor" : " elu"));
    LinearInputs in = make_inputs(c, dtype, 11);
    if (map == FeatureMap::favor) {
      in.options.feature_map = map;
      in.options.num_features = 12;  // a block and a part of one for D 8, part of one for D 16
      in.options.seed = 3;
    }
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
                              LinearCase{1, 6, 7, 1, 1, 4, 3, Causal::none, {5}}})
    for (const FeatureMap map : {FeatureMap::elu, FeatureMap::favor}) {
      SCOPED_TRACE(c.name() + (map == FeatureMap::favor ? " favor" : " elu"));
      LinearInputs in = make_inputs(c, DType::f64, 15);
      in.options.backend = Backend::reference;
      in.options.feature_map = map;
      if (map == FeatureMap::favor) {
        in.options.num_features = 5;
        // The backward holds the stabilizers constant; they reach out only through eps, which this
        // makes negligible against the differences.
        in.options.eps = 1e-14;
      }
      const LinearGrads g = linear_attention_backward(in.dout, in.q, in.k, in.v, in.options);
      expect_finite_differences(
          [&](const Tensor& q, const Tensor& k, const Tensor& v) {
            return linear_attention(q, k, v, in.options);
          },
          in.dout, {in.q, in.k, in.v}, {g.dq, g.dk, g.dv}, 1, 1e-7);
    }
}

TEST(Linear, SameBitsOnAnyThreadCountAndFromPermutedViews) {
  for (const FeatureMap map : {FeatureMap::elu, FeatureMap::favor}) {
    const LinearCase c{2, 150, 150, 4, 2, 16, 16, Causal::top_left, {150, 111}};
    LinearInputs in = make_inputs(c, DType::f32, 12);
    in.options.feature_map = map;
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

// The recurrent form, step by step or after a prompt appended at once, gives the rows of the
// causal parallel form (GQA, f32 and f64, a strided q, both feature maps), and refuses what does
// not fit its state without changing it.
TEST(Linear, RecurrentStepsEqualTheCausalForm) {
  for (const auto& [map, dtype] :
       {std::pair{FeatureMap::elu, DType::f64}, std::pair{FeatureMap::elu, DType::f32},
        std::pair{FeatureMap::favor, DType::f64}, std::pair{FeatureMap::favor, DType::f32}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + (map == FeatureMap::favor ? " favor" : " elu"));
    LinearInputs in = make_inputs({2, 150, 150, 4, 2, 6, 5, Causal::top_left, {}}, dtype, 16);
    LinearOptions state_options;
    if (map == FeatureMap::favor) {
      // Keys that grow along the sequence, so that later keys raise the stabilizer and the
      // state is rescaled many times.
      in.k = scale_positions(in.k, [](std::int64_t t) { return 1 + 0.02 * double(t); });
      state_options.feature_map = in.options.feature_map = map;
      state_options.num_features = in.options.num_features = 9;
      state_options.seed = in.options.seed = 4;
    }
    const Tensor whole = linear_attention(in.q, in.k, in.v, in.options);
    LinearState state(2, 2, 6, 5, state_options);
    for (std::int64_t t = 0; t < 150; ++t) {
      const Tensor out =
          state.step(in.q.slice(1, t, t + 1), in.k.slice(1, t, t + 1), in.v.slice(1, t, t + 1));
      EXPECT_EQ(out.dtype(), dtype);
      EXPECT_LT(relative_difference(out, whole.slice(1, t, t + 1)),
                dtype == DType::f64 ? 1e-12 : 2e-5)
          << t;
    }
    EXPECT_EQ(state.length(), 150);
    // A prompt appended at once, then decoding: the same rows.
    LinearState prompted(2, 2, 6, 5, state_options);
    prompted.append(in.k.slice(1, 0, 100), in.v.slice(1, 0, 100));
    EXPECT_EQ(prompted.length(), 100);
    for (std::int64_t t = 100; t < 150; ++t) {
      const Tensor out =
          prompted.step(in.q.slice(1, t, t + 1), in.k.slice(1, t, t + 1), in.v.slice(1, t, t + 1));
      EXPECT_LT(relative_difference(out, whole.slice(1, t, t + 1)),
                dtype == DType::f64 ? 1e-12 : 2e-5)
          << t;
    }
    expect_error([&] { prompted.append(in.k.slice(1, 0, 3), in.v.slice(1, 0, 2)); }, "v");
    EXPECT_EQ(prompted.length(), 150);
    const Tensor k1 = in.k.slice(1, 0, 1), v1 = in.v.slice(1, 0, 1);
    expect_error([&] { state.step(in.q.slice(1, 0, 1).slice(2, 0, 3), k1, v1); }, "q");
    expect_error([&] { state.step(in.q.slice(1, 0, 1), k1.slice(3, 0, 2), v1); }, "k");
    expect_error([&] { state.step(in.q.slice(1, 0, 2), k1, v1); }, "q");
    EXPECT_EQ(state.length(), 150);
  }
  expect_error([] { LinearState(1, 0, 4, 4); }, "Hk");
  LinearOptions bad;
  bad.eps = 0;
  expect_error([&] { LinearState(1, 1, 4, 4, bad); }, "options.eps");
  bad = {};
  bad.causal = Causal::top_left;
  expect_error([&] { LinearState(1, 1, 4, 4, bad); }, "options.causal");
  bad = {};
  bad.num_features = 3;
  expect_error([&] { LinearState(1, 1, 4, 4, bad); }, "options.num_features");
}

// FAVOR+'s features: the same bits from the same seed, other bits from another; rows orthogonal
// within each block of D; and rows distributed as N(0, I_D): their squared lengths average D.
TEST(Favor, FeaturesAreSeededOrthogonalBlocksOfGaussianRows) {
  const std::int64_t D = 8, F = 4096;
  const Tensor w = favor_features(D, F, 5);
  EXPECT_EQ(w.shape(), (Shape{F, D}));
  EXPECT_EQ(w.to_vector(), favor_features(D, F, 5).to_vector());
  EXPECT_NE(w.to_vector(), favor_features(D, F, 6).to_vector());
  // The first 20 rows of seed 5 with F = 20: the same as the first 20 of F = 4096.
  EXPECT_EQ(favor_features(D, 20, 5).to_vector(), w.slice(0, 0, 20).to_vector());
  double squared = 0;
  for (std::int64_t f = 0; f < F; ++f) {
    double norm_f = 0;
    for (std::int64_t c = 0; c < D; ++c) norm_f += w.at({f, c}) * w.at({f, c});
    squared += norm_f;
    for (std::int64_t g = f / D * D; g < f; ++g) {  // earlier rows of the same block
      double dot = 0, norm_g = 0;
      for (std::int64_t c = 0; c < D; ++c) {
        dot += w.at({f, c}) * w.at({g, c});
        norm_g += w.at({g, c}) * w.at({g, c});
      }
      EXPECT_LT(std::fabs(dot) / std::sqrt(norm_f * norm_g), 1e-12) << f << " " << g;
    }
  }
  // E |w|^2 = D, sd of the mean sqrt(2 D / F) = 0.0625: 5 sd.
  EXPECT_NEAR(squared / F, double(D), 0.32);
  expect_error([] { favor_features(0, 4, 0); }, "D");
  expect_error([] { favor_features(4, 0, 0); }, "F");
  LinearOptions o;
  o.feature_map = FeatureMap::favor;
  EXPECT_EQ(linear_feature_count(o, 64), 266);  // int(64 ln 64), Performer's default
  o.num_features = 32;
  EXPECT_EQ(linear_feature_count(o, 64), 32);
  EXPECT_EQ(linear_feature_count({}, 64), 64);
}

// FAVOR+ estimates softmax attention: its error against the exact softmax(s q k^T) v, averaged
// over seeds, shrinks as F grows (Monte Carlo: about 1 / sqrt(F), so by about 2x per 4x F; the
// test asks for 1.4x with causal and full masks, a margin for the draws).
TEST(Favor, ErrorAgainstSoftmaxAttentionShrinksAsFeaturesGrow) {
  for (const Causal causal : {Causal::none, Causal::top_left}) {
    SCOPED_TRACE(causal == Causal::none ? "full" : "causal");
    Generator g(21);
    const auto half = [](std::int64_t) { return 0.5; };
    const Tensor q = scale_positions(Tensor::randn({1, 64, 2, 16}, g, DType::f64), half);
    const Tensor k = scale_positions(Tensor::randn({1, 64, 2, 16}, g, DType::f64), half);
    const Tensor v = Tensor::randn({1, 64, 2, 16}, g, DType::f64);
    AttentionOptions exact;
    exact.causal = causal;
    const Tensor want = attention_forward(q, k, v, exact).out;
    double previous = INFINITY;
    for (const std::int64_t F : {16, 64, 256, 1024}) {
      double error = 0;
      const int seeds = 8;
      for (int seed = 0; seed < seeds; ++seed) {
        LinearOptions o;
        o.feature_map = FeatureMap::favor;
        o.num_features = F;
        o.seed = static_cast<std::uint64_t>(seed);
        o.causal = causal;
        const Tensor got = linear_attention(q, k, v, o);
        const std::vector<double> a = got.to_vector(), b = want.to_vector();
        double squared = 0, norm = 0;
        for (std::size_t n = 0; n < a.size(); ++n) {
          squared += (a[n] - b[n]) * (a[n] - b[n]);
          norm += b[n] * b[n];
        }
        error += std::sqrt(squared / norm) / seeds;
      }
      std::cout << "[ favor    ] F " << F << ": relative error " << error << "\n";
      EXPECT_LT(error * 1.4, previous) << "F " << F;
      previous = error;
    }
    EXPECT_LT(previous, 0.1);  // F 1024
  }
}

// The stabilizers: q and k 40 times larger put the logits far past exp's range (s q . k of
// order 1e3); every feature stays at most 1 / sqrt(F), and the f32 kernel still matches the f64
// formula, finite, forward and backward.
TEST(Favor, StabilizersKeepLargeInputsFinite) {
  for (const Causal causal : {Causal::none, Causal::top_left}) {
    LinearInputs in = make_inputs({1, 150, 150, 2, 2, 16, 8, causal, {}}, DType::f64, 22);
    in.q = scale_positions(in.q, [](std::int64_t) { return 40.0; });
    in.k = scale_positions(in.k, [](std::int64_t) { return 40.0; });
    in.options.feature_map = FeatureMap::favor;
    in.options.num_features = 32;
    LinearOptions reference = in.options;
    reference.backend = Backend::reference;
    const Tensor want = linear_attention(in.q, in.k, in.v, reference);
    const LinearGrads want_g = linear_attention_backward(in.dout, in.q, in.k, in.v, reference);
    const Tensor q = in.q.to(DType::f32), k = in.k.to(DType::f32), v = in.v.to(DType::f32);
    const Tensor got = linear_attention(q, k, v, in.options);
    const LinearGrads got_g =
        linear_attention_backward(in.dout.to(DType::f32), q, k, v, in.options);
    for (const double x : got.to_vector()) ASSERT_TRUE(std::isfinite(x)) << "got";
    for (const double x : want.to_vector()) ASSERT_TRUE(std::isfinite(x)) << "want";
    EXPECT_LT(relative_difference(got, want), 1e-3);
    EXPECT_LT(relative_difference(got_g.dv, want_g.dv), 1e-3);
    EXPECT_LT(relative_difference(got_g.dq, want_g.dq), 1e-3);
    EXPECT_LT(relative_difference(got_g.dk, want_g.dk), 1e-3);
  }
}

// bf16 and f16 are storage: the result is the f32 kernel's on the widened inputs, rounded to the
// inputs' dtype, bit for bit, forward and backward, for both feature maps.
TEST(Linear, HalfInputsAreTheF32KernelOnTheirValues) {
  for (const DType half : {DType::bf16, DType::f16}) {
    for (const FeatureMap map : {FeatureMap::elu, FeatureMap::favor}) {
      SCOPED_TRACE(std::string(dtype_name(half)) + (map == FeatureMap::favor ? " favor" : " elu"));
      LinearInputs in =
          make_inputs({2, 150, 150, 4, 2, 16, 8, Causal::top_left, {150, 99}}, half, 23);
      in.options.feature_map = map;
      const Tensor out = linear_attention(in.q, in.k, in.v, in.options);
      const LinearGrads g = linear_attention_backward(in.dout, in.q, in.k, in.v, in.options);
      EXPECT_EQ(out.dtype(), half);
      EXPECT_EQ(g.dk.dtype(), half);
      const auto wide = [](const Tensor& t) { return t.to(DType::f32); };
      const Tensor want = linear_attention(wide(in.q), wide(in.k), wide(in.v), in.options);
      const LinearGrads want_g =
          linear_attention_backward(wide(in.dout), wide(in.q), wide(in.k), wide(in.v), in.options);
      EXPECT_EQ(out.to_vector(), want.to(half).to_vector());
      EXPECT_EQ(g.dq.to_vector(), want_g.dq.to(half).to_vector());
      EXPECT_EQ(g.dk.to_vector(), want_g.dk.to(half).to_vector());
      EXPECT_EQ(g.dv.to_vector(), want_g.dv.to(half).to_vector());
    }
  }
}

TEST(Linear, RefusesBadArguments) {
  const LinearInputs in = make_inputs({1, 4, 4, 2, 2, 4, 4, Causal::none, {}}, DType::f32, 14);
  expect_error([&] { linear_attention(in.q.to(DType::bf16), in.k, in.v); }, "k");  // k: f32
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
  LinearOptions elu_with;
  elu_with.num_features = 8;
  expect_error([&] { linear_attention(in.q, in.k, in.v, elu_with); }, "options.num_features");
  elu_with = {};
  elu_with.scale = 0.5;
  expect_error([&] { linear_attention(in.q, in.k, in.v, elu_with); }, "options.scale");
  for (const double scale : {0.0, -1.0, double(NAN), 1e300}) {
    LinearOptions bad;
    bad.feature_map = FeatureMap::favor;
    bad.scale = scale;
    expect_error([&] { linear_attention(in.q, in.k, in.v, bad); }, "options.scale");
  }
  LinearOptions negative;
  negative.feature_map = FeatureMap::favor;
  negative.num_features = -1;
  expect_error([&] { linear_attention(in.q, in.k, in.v, negative); }, "options.num_features");
}

}  // namespace
}  // namespace qkv::testing
