// The fused kernel gives bitwise the same outputs and gradients on 1, 2, 3 and 4 threads and
// over more than 100 reruns, for every option and both dtypes; QKV_BACKEND overrides the backend
// option; rows with every key dropped give zeros and -inf, never NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
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

// A fused case, with the bias in a shape of its own (broadcast to [B, Hq, Tq, Tk]) when
// bias_shape is not empty.
struct DeterminismCase {
  FusedCase c;
  Shape bias_shape;

  std::string name() const {
    std::string s = c.name();
    if (!bias_shape.empty()) {
      s += "_shape";
      for (const std::int64_t n : bias_shape) s += "_" + std::to_string(n);
    }
    return s;
  }
};

void PrintTo(const DeterminismCase& c, std::ostream* os) { *os << c.name(); }

FusedInputs make_determinism_inputs(const DeterminismCase& d, DType dtype) {
  FusedInputs in = make_inputs(d.c, dtype);
  if (!d.bias_shape.empty()) {
    Generator g(d.c.seed + 100);
    in.options.bias = Tensor::randn(d.bias_shape, g, DType::f64).to(dtype);
  }
  return in;
}

// Sets qkv's thread budget (a call alone runs on all of it) and restores it after.
class ThreadBudget {
 public:
  ThreadBudget() : saved_(num_threads()) {}
  ~ThreadBudget() { set_num_threads(saved_); }
  ThreadBudget(const ThreadBudget&) = delete;
  ThreadBudget& operator=(const ThreadBudget&) = delete;

 private:
  int saved_;
};

class ThreadCountInvariance : public ::testing::TestWithParam<DeterminismCase> {};

// The first run on 1 thread, then 4 more on 2, 3, 4 and again 2 threads: 128 reruns over the 16
// cases and both dtypes, in which the dynamically scheduled items land on other threads.
TEST_P(ThreadCountInvariance, BitwiseEqualOn1To4ThreadsAndOverReruns) {
  SCOPED_TRACE(GetParam().name());
  const ThreadBudget restore;
  for (const DType dtype : {DType::f32, DType::f64}) {
    const FusedInputs in = make_determinism_inputs(GetParam(), dtype);
    set_num_threads(1);
    const auto first = run_all(in, Backend::cpu);
    for (const int threads : {2, 3, 4, 2}) {
      set_num_threads(threads);
      EXPECT_TRUE(bitwise_equal(first, run_all(in, Backend::cpu)))
          << threads << " threads, " << dtype_name(dtype);
    }
  }
}

// Small problems that between them take every option, with lengths that are not multiples of the
// 64-row and 64-key tiles: causal both ways, windows, Tq != Tk both ways, lengths, a keep-mask,
// biases of every broadcast kind, ALiBi, soft-capping, dropout, GQA and MQA, strided inputs; the
// backward's dQ partials of several key chunks (Tk > 512); and decode shapes (Tq <= 16) on the
// split-keys path, whose items depend on the thread count.
std::vector<DeterminismCase> determinism_cases() {
  std::vector<DeterminismCase> cases;
  const auto add = [&](FusedCase c, Shape bias_shape = {}) {
    c.seed = cases.size() + 1;
    cases.push_back({c, bias_shape});
  };
  FusedCase c;
  c.Tq = c.Tk = 64;
  add(c);  // exactly one tile, no option
  c = FusedCase();
  c.B = 2, c.Tq = c.Tk = 100, c.Hq = 4, c.Hk = 2, c.Dv = 24;
  c.causal = Causal::top_left;
  add(c);
  c = FusedCase();
  c.Tq = 40, c.Tk = 520, c.window = {100, 7}, c.causal = Causal::bottom_right;
  add(c);  // 2 key chunks in the backward
  c = FusedCase();
  c.B = 2, c.Tq = 100, c.Tk = 70, c.Hq = 3, c.Hk = 1, c.causal = Causal::bottom_right;
  c.padding = c.mask = c.strided = true;
  add(c);  // the first 30 rows keep no key
  c = FusedCase();
  c.Tq = c.Tk = 100, c.window = {30, 30};
  add(c);
  c = FusedCase();
  c.B = 2, c.Tq = c.Tk = 70, c.Hq = 4, c.Hk = 2;
  c.alibi = true, c.softcap = 3.0, c.dropout = 0.3;
  add(c);
  c = FusedCase();
  c.B = 2, c.Tq = 40, c.Tk = 70, c.Hq = 2, c.bias = true;
  add(c);                           // [Hq, Tq, Tk]
  add(c, {c.B, c.Hq, c.Tq, c.Tk});  // full
  add(c, {c.B, 1, c.Tq, c.Tk});     // shared by the heads
  add(c, {c.Hq, 1, c.Tk});          // shared by the queries
  add(c, {c.B, 1, c.Tq, 1});        // shared by the keys: one key chunk
  add(c, {1});                      // one number
  c = FusedCase();
  c.B = 3, c.Tq = 70, c.Tk = 130, c.Hk = 1, c.D = 24, c.Dv = 8;
  c.causal = Causal::bottom_right, c.window = {100, 0};
  c.padding = c.mask = c.bias = c.alibi = c.strided = true;  // the last batch keeps no key
  c.softcap = 4.0, c.dropout = 0.25;
  add(c, {c.B, 1, c.Tq, c.Tk});
  c = FusedCase();
  c.Tq = 1, c.Tk = 2100, c.Hq = 4, c.Hk = 2;
  add(c);  // decode: 3 key splits, k/v heads dealt out in groups on 4 threads; 8 backward chunks
  c = FusedCase();
  c.Tq = 5, c.Tk = 1100, c.causal = Causal::bottom_right;
  c.alibi = true, c.dropout = 0.1;
  add(c);
  c = FusedCase();
  c.B = 2, c.Tq = 16, c.Tk = 1100, c.Hq = 2, c.Hk = 1, c.D = c.Dv = 8;
  c.padding = c.mask = c.bias = true, c.softcap = 2.0, c.window = {400, -1};
  add(c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fused, ThreadCountInvariance, ::testing::ValuesIn(determinism_cases()),
                         [](const ::testing::TestParamInfo<DeterminismCase>& info) {
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

// Decode from a cache past the key-by-key threshold (flash_decode.cpp, kOnlineMinElements) in
// [B, T, H, D], where the items take groups of heads whose number follows the thread count (3
// splits of 1024 keys: one group on 1 to 3 threads, two on 4), and a mask that drops one key of
// the first tile for one head only. Whether a tile goes key by key or through scores and values
// is decided from every head's tile, never from the heads one item holds, so the bits are the
// same on every thread count.
TEST(DecodeThreadCount, PerHeadMaskPastTheKeyByKeyThreshold) {
  const ThreadBudget restore;
  const std::int64_t H = 32, Tk = 3072, D = 128;  // 25.2M elements of K and V
  Generator g(5);
  const Tensor q = Tensor::randn({1, 1, H, D}, g, DType::f32);
  const Tensor k = Tensor::randn({1, Tk, H, D}, g, DType::f32);
  const Tensor v = Tensor::randn({1, Tk, H, D}, g, DType::f32);
  AttentionOptions options;
  options.backend = Backend::cpu;
  options.mask = Tensor::full({1, H, 1, Tk}, 1.0, DType::boolean);
  options.mask.set({0, 20, 0, 10}, 0.0);
  set_num_threads(1);
  const AttentionOutput first = attention_forward(q, k, v, options);
  for (const int threads : {2, 3, 4, 5}) {
    set_num_threads(threads);
    const AttentionOutput again = attention_forward(q, k, v, options);
    EXPECT_TRUE(bitwise_equal({first.out.to_vector(), first.lse.to_vector()},
                              {again.out.to_vector(), again.lse.to_vector()}))
        << threads << " threads";
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
