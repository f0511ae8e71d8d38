// The fused kernel gives bitwise the same outputs and gradients for 1, 2 and 3 threads and over
// repeated runs; QKV_BACKEND overrides the backend option; rows with every key dropped give
// zeros and -inf, never NaN.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/fused_case.hpp"

namespace qkv::testing {
namespace {

std::vector<std::vector<double>> run_all(const FusedInputs& in, Backend backend) {
  AttentionOptions options = in.options;
  options.backend = backend;
  const AttentionOutput f = attention_forward(in.q, in.k, in.v, options);
  const AttentionGrads g = attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, options);
  std::vector<std::vector<double>> all = {f.out.to_vector(), f.lse.to_vector(), g.dq.to_vector(),
                                          g.dk.to_vector(), g.dv.to_vector()};
  if (g.dbias.defined()) all.push_back(g.dbias.to_vector());
  return all;
}

bool bitwise_equal(const std::vector<std::vector<double>>& a,
                   const std::vector<std::vector<double>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t t = 0; t < a.size(); ++t) {
    if (a[t].size() != b[t].size() ||
        std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(double)) != 0) {
      return false;
    }
  }
  return true;
}

class ThreadCountInvariance : public ::testing::TestWithParam<FusedCase> {};

TEST_P(ThreadCountInvariance, BitwiseEqualFor1To3ThreadsAndRepeats) {
  const FusedCase& c = GetParam();
  SCOPED_TRACE(c.name());
  const int saved = omp_get_max_threads();
  for (const DType dtype : {DType::f32, DType::f64}) {
    const FusedInputs in = make_inputs(c, dtype);
    omp_set_num_threads(1);
    const auto one = run_all(in, Backend::cpu);
    for (const int threads : {2, 3, 2}) {
      omp_set_num_threads(threads);
      EXPECT_TRUE(bitwise_equal(one, run_all(in, Backend::cpu)))
          << threads << " threads, " << dtype_name(dtype);
    }
  }
  omp_set_num_threads(saved);
}

std::vector<FusedCase> determinism_cases() {
  FusedCase plain;
  plain.B = 2;
  plain.Tq = plain.Tk = 700;  // several k-chunks, so dQ partials are reduced
  plain.Hq = 4;
  plain.Hk = 2;
  plain.D = plain.Dv = 32;
  plain.causal = Causal::bottom_right;
  FusedCase everything = plain;
  everything.Tq = 300;
  everything.window = {200, 10};
  everything.padding = everything.mask = everything.bias = everything.alibi = true;
  everything.softcap = 4.0;
  everything.dropout = 0.25;
  FusedCase decode = plain;  // the split-keys path: partial states merged across key chunks
  decode.Tq = 3;
  decode.Tk = 3000;
  decode.dropout = 0.1;
  return {plain, everything, decode};
}

INSTANTIATE_TEST_SUITE_P(Fused, ThreadCountInvariance, ::testing::ValuesIn(determinism_cases()),
                         [](const ::testing::TestParamInfo<FusedCase>& info) {
                           return info.param.name();
                         });

// Restores QKV_BACKEND as it was when the test started.
class BackendEnvironment : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* value = std::getenv("QKV_BACKEND");
    had_ = value != nullptr;
    if (had_) saved_ = value;
  }
  void TearDown() override {
    if (had_) {
      setenv("QKV_BACKEND", saved_.c_str(), 1);
    } else {
      unsetenv("QKV_BACKEND");
    }
  }
  bool had_ = false;
  std::string saved_;
};

TEST_F(BackendEnvironment, ReferenceForcedEverywhere) {
  FusedCase c;
  c.Tq = c.Tk = 70;
  c.bias = true;
  c.dropout = 0.2;
  c.causal = Causal::bottom_right;
  const FusedInputs in = make_inputs(c, DType::f32);
  unsetenv("QKV_BACKEND");
  const auto reference = run_all(in, Backend::reference);
  const auto fused = run_all(in, Backend::cpu);
  EXPECT_FALSE(bitwise_equal(reference, fused)) << "the two backends should round differently";
  setenv("QKV_BACKEND", "reference", 1);
  EXPECT_TRUE(bitwise_equal(reference, run_all(in, Backend::cpu)));
  EXPECT_TRUE(bitwise_equal(reference, run_all(in, Backend::automatic)));
  setenv("QKV_BACKEND", "cpu", 1);
  EXPECT_TRUE(bitwise_equal(fused, run_all(in, Backend::reference)));
}

TEST_F(BackendEnvironment, UnknownBackendNameIsAnError) {
  FusedCase c;
  const FusedInputs in = make_inputs(c, DType::f32);
  setenv("QKV_BACKEND", "gpu", 1);
  try {
    attention_forward(in.q, in.k, in.v, in.options);
    FAIL() << "expected qkv::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "QKV_BACKEND");
    EXPECT_NE(std::string(e.what()).find("gpu"), std::string::npos) << e.what();
  }
}

TEST(FusedMasking, RowsWithEveryKeyDroppedGiveZerosAndMinusInfinity) {
  FusedCase c;
  c.B = 3;  // the last batch keeps no key at all (see make_inputs)
  c.Tq = 70;
  c.Tk = 90;
  c.padding = true;
  c.bias = true;
  c.dropout = 0.1;
  for (const DType dtype : {DType::f32, DType::f64}) {
    const FusedInputs in = make_inputs(c, dtype);
    AttentionOptions options = in.options;
    options.backend = Backend::cpu;
    const AttentionOutput f = attention_forward(in.q, in.k, in.v, options);
    const AttentionGrads g = attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, options);
    for (const Tensor* t : {&f.out, &g.dq, &g.dk, &g.dv, &g.dbias}) {
      for (const double x : t->to_vector()) ASSERT_FALSE(std::isnan(x));
    }
    for (std::int64_t i = 0; i < c.Tq; ++i) {
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        EXPECT_EQ(f.lse.at({2, h, i}), -INFINITY);
        for (std::int64_t d = 0; d < c.D; ++d) {
          EXPECT_EQ(f.out.at({2, i, h, d}), 0.0);
          EXPECT_EQ(g.dq.at({2, i, h, d}), 0.0);
        }
      }
    }
    // Batch 1 drops its last 3 queries: whole rows, so again zeros and -inf.
    for (std::int64_t i = c.Tq - 3; i < c.Tq; ++i) EXPECT_EQ(f.lse.at({1, 0, i}), -INFINITY);
  }
}

TEST(FusedNumerics, ScoresOfMagnitude1e4StayFinite) {
  FusedCase c;
  c.Tq = c.Tk = 130;
  c.D = c.Dv = 16;
  const FusedInputs in = make_inputs(c, DType::f32);
  FusedInputs big = in;
  big.q = Tensor::empty(in.q.shape());
  big.q.copy_from(in.q);
  for (std::int64_t n = 0; n < big.q.numel(); ++n) {
    float* x = big.q.data_as<float>();
    x[n] *= 100.0f;
  }
  big.k = big.q.slice(1, 0, c.Tk).clone();  // q . k up to |q|^2 ~ 1e4 * D
  AttentionOptions options = big.options;
  options.backend = Backend::cpu;
  const AttentionOutput f = attention_forward(big.q, big.k, big.v, options);
  const AttentionGrads g = attention_backward(big.dout, big.q, big.k, big.v, f.out, f.lse, options);
  for (const Tensor* t : {&f.out, &f.lse, &g.dq, &g.dk, &g.dv}) {
    for (const double x : t->to_vector()) ASSERT_TRUE(std::isfinite(x));
  }
}

}  // namespace
}  // namespace qkv::testing
