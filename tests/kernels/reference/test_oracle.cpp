// The reference forward (out, lse) and attention_weights against the dense long-double oracle of
// oracle.hpp: every option alone, all of them composed, both causal alignments with Tq < Tk and
// Tq > Tk, GQA and MQA, cross attention with Dv != D, masks and biases in every broadcast shape,
// strided inputs, a custom scale. f64 must agree to ~1e-12; f32, bf16 and f16 inputs to the
// rounding of their storage type.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference/oracle.hpp"

namespace qkv::testing {
namespace {

// f64 against long double: a handful of roundings per term, over sums of at most a few dozen
// terms of size O(1), leaves errors near 1e-15; 1e-12 still catches any real slip.
constexpr double kF64Tol = 1e-12;

struct Tolerance {
  double rtol, atol;
};

// Storage rounding of out and P in the input dtype (half an ulp, doubled for slack) on top of the
// f32 accumulation, which stays below 1e-5 for these O(1) problems. lse is always f32 or wider.
Tolerance storage_tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return {0x1.0p-8, 2e-5};
    case DType::f16:
      return {0x1.0p-10, 2e-5};
    default:
      return {2e-5, 2e-5};
  }
}

std::vector<Case> oracle_cases() {
  std::vector<Case> cases;
  auto add = [&](auto&& edit) {
    Case c;
    edit(c);
    c.seed = cases.size() + 1;
    cases.push_back(c);
  };
  add([](Case&) {});
  add([](Case& c) { c.B = 2, c.Tq = 1, c.Tk = 1, c.D = 3, c.Dv = 2; });
  add([](Case& c) { c.B = 2, c.Tq = 9, c.Tk = 7, c.Hq = 3, c.Hk = 3; });
  // Causal, both alignments, square and both rectangular ways.
  for (const Causal causal : {Causal::top_left, Causal::bottom_right}) {
    for (const auto& [tq, tk] : {std::pair{6, 6}, std::pair{4, 9}, std::pair{9, 4}}) {
      add([&](Case& c) { c.causal = causal, c.Tq = tq, c.Tk = tk, c.B = 2; });
    }
  }
  // Windows: one side, the other, both, zero width, rectangular.
  for (const Window w : {Window{2, -1}, Window{-1, 1}, Window{1, 2}, Window{0, 0}}) {
    add([&](Case& c) { c.window = w, c.Tq = 7, c.Tk = 7; });
  }
  add([](Case& c) { c.window = {1, 1}, c.Tq = 4, c.Tk = 9; });
  add([](Case& c) { c.window = {2, 0}, c.Tq = 9, c.Tk = 4; });
  add([](Case& c) { c.window = {3, -1}, c.causal = Causal::top_left, c.Tq = 5, c.Tk = 8; });
  // Variable lengths; B = 3 pads away every key of the last batch.
  add([](Case& c) { c.padding = true, c.B = 3, c.Tq = 6, c.Tk = 7; });
  add([](Case& c) { c.padding = true, c.B = 2, c.causal = Causal::bottom_right, c.Tq = 5; });
  add([](Case& c) { c.padding = true, c.B = 2, c.window = {1, 1}, c.Tq = 5, c.Tk = 8; });
  // Masks and biases in every broadcast shape.
  for (const Broadcast s : {Broadcast::tk, Broadcast::tq_tk, Broadcast::h_tq_tk, Broadcast::h_tk,
                            Broadcast::b_tq_tk, Broadcast::full}) {
    add([&](Case& c) { c.mask = s, c.B = 2, c.Tq = 5, c.Tk = 6, c.Hq = 3, c.Hk = 1; });
    add([&](Case& c) { c.bias = s, c.B = 2, c.Tq = 5, c.Tk = 6, c.Hq = 3, c.Hk = 1; });
  }
  add([](Case& c) { c.alibi = true, c.Hq = 4, c.Hk = 2, c.Tq = 6, c.Tk = 6; });
  add([](Case& c) { c.alibi = true, c.Hq = 2, c.Tq = 3, c.Tk = 8, c.B = 2, c.padding = true; });
  add([](Case& c) { c.alibi = true, c.Tq = 8, c.Tk = 3; });
  add([](Case& c) { c.softcap = 0.5, c.Tq = 6, c.Tk = 6; });
  add([](Case& c) { c.softcap = 2.0, c.bias = Broadcast::full, c.scale = 3.0; });
  add([](Case& c) { c.dropout = 0.3, c.B = 2, c.Tq = 7, c.Tk = 8, c.Hq = 3, c.Hk = 3; });
  add([](Case& c) { c.dropout = 0.8, c.Tq = 6, c.Tk = 9; });
  // GQA ratios 1, 2, 4 and MQA.
  for (const auto& [hq, hk] :
       {std::pair{4, 4}, std::pair{4, 2}, std::pair{8, 2}, std::pair{3, 1}, std::pair{4, 1}}) {
    add([&](Case& c) { c.Hq = hq, c.Hk = hk, c.B = 2, c.Tq = 4, c.Tk = 5; });
  }
  // Cross attention with Dv != D.
  add([](Case& c) { c.Tq = 3, c.Tk = 9, c.D = 4, c.Dv = 6; });
  add([](Case& c) { c.Tq = 7, c.Tk = 2, c.D = 1, c.Dv = 5; });
  add([](Case& c) { c.Tq = 4, c.Tk = 6, c.D = 6, c.Dv = 1; });
  add([](Case& c) { c.scale = 0.37, c.Tq = 5, c.Tk = 7; });
  add([](Case& c) { c.scale = -1.5, c.D = 2; });
  // Strided inputs (masks and biases then strided too).
  for (const Layout l : {Layout::permuted, Layout::sliced}) {
    add([&](Case& c) { c.layout = l, c.B = 2, c.Hq = 4, c.Hk = 2, c.Tq = 5, c.Tk = 6, c.Dv = 3; });
    add([&](Case& c) { c.layout = l, c.mask = Broadcast::full, c.bias = Broadcast::tq_tk; });
  }
  // Everything at once, in several geometries.
  add([](Case& c) {
    c.B = 3, c.Tq = 6, c.Tk = 9, c.Hq = 4, c.Hk = 2, c.D = 5, c.Dv = 3;
    c.causal = Causal::bottom_right, c.window = {3, 1}, c.padding = true;
    c.mask = Broadcast::b_tq_tk, c.bias = Broadcast::h_tk, c.alibi = true, c.softcap = 1.5;
    c.dropout = 0.25, c.scale = 0.6, c.layout = Layout::sliced;
  });
  add([](Case& c) {
    c.B = 2, c.Tq = 8, c.Tk = 5, c.Hq = 4, c.Hk = 1, c.D = 3, c.Dv = 4;
    c.causal = Causal::top_left, c.window = {2, 0}, c.padding = true;
    c.mask = Broadcast::full, c.bias = Broadcast::full, c.alibi = true, c.softcap = 0.8;
    c.dropout = 0.5, c.layout = Layout::permuted;
  });
  add([](Case& c) {
    c.B = 2, c.Tq = 7, c.Tk = 7, c.Hq = 2, c.Hk = 2, c.D = 4, c.Dv = 2;
    c.causal = Causal::bottom_right, c.window = {-1, 2}, c.padding = true;
    c.mask = Broadcast::tq_tk, c.bias = Broadcast::b_tq_tk, c.alibi = true, c.softcap = 3.0;
    c.dropout = 0.1, c.scale = 0.9;
  });
  return cases;
}

class ReferenceForward : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceForward, F64MatchesDenseOracle) {
  const Problem p = make_problem(GetParam(), DType::f64);
  SCOPED_TRACE(p.describe());
  const Dense ref = dense_attention(p.q, p.k, p.v, p.options);
  const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
  ASSERT_EQ(f.out.shape(), (Shape{ref.B, ref.Tq, ref.Hq, ref.Dv}));
  ASSERT_EQ(f.lse.shape(), (Shape{ref.B, ref.Hq, ref.Tq}));
  EXPECT_EQ(f.out.dtype(), DType::f64);
  EXPECT_EQ(f.lse.dtype(), DType::f64);
  EXPECT_TRUE(all_close("out", f.out, ref.out, kF64Tol, kF64Tol));
  EXPECT_TRUE(all_close("lse", f.lse, ref.lse, kF64Tol, kF64Tol));
  const Tensor w = attention_weights(p.q, p.k, p.options);
  ASSERT_EQ(w.shape(), (Shape{ref.B, ref.Hq, ref.Tq, ref.Tk}));
  EXPECT_EQ(w.dtype(), DType::f64);
  EXPECT_TRUE(all_close("attention_weights", w, ref.p, kF64Tol, kF64Tol));
}

// The overload that writes into caller tensors, here strided views, gives the same bits.
TEST_P(ReferenceForward, WritingOverloadMatchesAllocating) {
  const Case& c = GetParam();
  const Problem p = make_problem(c, DType::f64);
  SCOPED_TRACE(p.describe());
  const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
  Tensor out = Tensor::full({c.B, c.Hq, c.Tq, c.Dv}, 12345.0, DType::f64).permute({0, 2, 1, 3});
  Tensor lse = Tensor::full({c.B, c.Tq, c.Hq}, 12345.0, DType::f64).permute({0, 2, 1});
  attention_forward(p.q, p.k, p.v, p.options, out, lse);
  EXPECT_EQ(out.to_vector(), f.out.to_vector());
  EXPECT_EQ(lse.to_vector(), f.lse.to_vector());
}

// f32, bf16 and f16 inputs against the oracle on exactly the same (rounded) values.
TEST_P(ReferenceForward, LowPrecisionMatchesDenseOracle) {
  const Case& c = GetParam();
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const Problem p = make_problem(c, dtype);
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + p.describe());
    const Dense ref = dense_attention(p.q, p.k, p.v, p.options);
    const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
    EXPECT_EQ(f.out.dtype(), dtype);
    EXPECT_EQ(f.lse.dtype(), DType::f32);
    const Tolerance t = storage_tolerance(dtype);
    // Dropout's 1/(1 - p) scales the output and its error.
    const double amplify = 1.0 / (1.0 - c.dropout);
    EXPECT_TRUE(all_close("out", f.out, ref.out, t.rtol * amplify, t.atol * amplify));
    EXPECT_TRUE(all_close("lse", f.lse, ref.lse, 2e-5, 2e-5));
    const Tensor w = attention_weights(p.q, p.k, p.options);
    EXPECT_EQ(w.dtype(), dtype);
    EXPECT_TRUE(all_close("attention_weights", w, ref.p, t.rtol, t.atol));
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, ReferenceForward, ::testing::ValuesIn(oracle_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Random, ReferenceForward, ::testing::ValuesIn(random_cases(150, 7, 9, 5)),
                         case_name);

// A bias in a dtype other than q's is read at its own values (converted, not reinterpreted), and
// dbias comes back in the bias's dtype: the f64 gradient rounded to f32.
TEST(ReferenceForwardMixed, BiasDtypeMayDifferFromInputs) {
  Case c;
  c.bias = Broadcast::tq_tk;
  Problem p = make_problem(c, DType::f64);
  p.options.bias = p.options.bias.to(DType::f32);
  SCOPED_TRACE(p.describe());
  const Dense ref = dense_attention(p.q, p.k, p.v, p.options);
  const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
  EXPECT_TRUE(all_close("out", f.out, ref.out, kF64Tol, kF64Tol));
  EXPECT_TRUE(all_close("lse", f.lse, ref.lse, kF64Tol, kF64Tol));
  const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, p.options);
  AttentionOptions wide = p.options;
  wide.bias = p.options.bias.to(DType::f64);
  const AttentionGrads gw = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, wide);
  ASSERT_EQ(g.dbias.dtype(), DType::f32);
  EXPECT_EQ(g.dbias.to_vector(), gw.dbias.to(DType::f32).to_vector());
  EXPECT_EQ(g.dq.to_vector(), gw.dq.to_vector());
}

// Any strides: zero (expanded views: one query row repeated, one value column repeated, a mask and
// a bias expanded to the full score shape) and negative (k reversed in time through from_blob).
// The forward must match the oracle, which reads through the same strides element by element, and
// the backward must equal the one on contiguous copies.
TEST(ReferenceForwardStrides, ZeroAndNegativeStrides) {
  const std::int64_t B = 2, Tq = 4, Tk = 5, Hq = 2, Hk = 1, D = 3, Dv = 3;
  Generator g(99);
  const Tensor q = Tensor::randn({B, 1, Hq, D}, g, DType::f64).expand({B, Tq, Hq, D});
  const Tensor k_storage = Tensor::randn({B, Tk, Hk, D}, g, DType::f64);
  const Tensor k = Tensor::from_blob(static_cast<double*>(k_storage.data()) + (Tk - 1) * Hk * D,
                                     {B, Tk, Hk, D}, {Tk * Hk * D, -Hk * D, D, 1}, DType::f64);
  const Tensor v = Tensor::randn({B, Tk, Hk, 1}, g, DType::f64).expand({B, Tk, Hk, Dv});
  ASSERT_EQ(k.stride(1), -Hk * D);
  ASSERT_EQ(q.stride(1), 0);
  AttentionOptions o;
  o.backend = Backend::reference;
  o.causal = Causal::bottom_right;
  o.mask = Tensor::from_values({Tk}, {1, 0, 1, 1, 1}, DType::boolean).expand({B, Hq, Tq, Tk});
  o.bias = Tensor::randn({Tk}, g, DType::f64).expand({B, Hq, Tq, Tk});
  SCOPED_TRACE("q=" + q.describe() + " k=" + k.describe() + " v=" + v.describe() + " " +
               describe(o));
  const Dense ref = dense_attention(q, k, v, o);
  const AttentionOutput f = attention_forward(q, k, v, o);
  EXPECT_TRUE(all_close("out", f.out, ref.out, kF64Tol, kF64Tol));
  EXPECT_TRUE(all_close("lse", f.lse, ref.lse, kF64Tol, kF64Tol));
  EXPECT_TRUE(all_close("attention_weights", attention_weights(q, k, o), ref.p, kF64Tol, kF64Tol));
  const Tensor dout = Tensor::randn({B, Tq, Hq, Dv}, g, DType::f64);
  const AttentionGrads gr = attention_backward(dout, q, k, v, f.out, f.lse, o);
  AttentionOptions dense_options = o;
  dense_options.mask = o.mask.contiguous();
  dense_options.bias = o.bias.contiguous();
  const AttentionGrads gc = attention_backward(dout, q.contiguous(), k.contiguous(), v.contiguous(),
                                               f.out, f.lse, dense_options);
  EXPECT_EQ(gr.dq.to_vector(), gc.dq.to_vector());
  EXPECT_EQ(gr.dk.to_vector(), gc.dk.to_vector());
  EXPECT_EQ(gr.dv.to_vector(), gc.dv.to_vector());
  EXPECT_EQ(gr.dbias.to_vector(), gc.dbias.to_vector());
}

// A hand-computed case, so that the oracle itself is anchored to numbers worked out on paper:
// one query, two keys, scale 1, q.k = (0, ln 3): P = (1/4, 3/4), out = P v, lse = ln 4.
TEST(ReferenceForwardByHand, TwoKeys) {
  const double ln3 = std::log(3.0);
  const Tensor q = Tensor::from_values({1, 1, 1, 1}, {1.0}, DType::f64);
  const Tensor k = Tensor::from_values({1, 2, 1, 1}, {0.0, ln3}, DType::f64);
  const Tensor v = Tensor::from_values({1, 2, 1, 2}, {4.0, -8.0, 8.0, 4.0}, DType::f64);
  AttentionOptions o;
  o.backend = Backend::reference;
  o.scale = 1.0;
  SCOPED_TRACE(describe(o));
  const AttentionOutput f = attention_forward(q, k, v, o);
  EXPECT_NEAR(f.out.at({0, 0, 0, 0}), 0.25 * 4.0 + 0.75 * 8.0, 1e-14);
  EXPECT_NEAR(f.out.at({0, 0, 0, 1}), 0.25 * -8.0 + 0.75 * 4.0, 1e-14);
  EXPECT_NEAR(f.lse.at({0, 0, 0}), std::log(4.0), 1e-14);
  const Dense ref = dense_attention(q, k, v, o);
  EXPECT_NEAR(static_cast<double>(ref.p[0]), 0.25, 1e-15);
  EXPECT_NEAR(static_cast<double>(ref.p[1]), 0.75, 1e-15);
}

}  // namespace
}  // namespace qkv::testing
