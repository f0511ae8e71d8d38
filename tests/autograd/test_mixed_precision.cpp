// Mixed precision in the engine: cast and its backward, matmul on bf16 and f16 against the f64
// product of the same half values, Autocast's matmul and attention equal to the casts written
// out by hand (values and gradients, bit for bit), its scope rules, and the ops that refuse half
// Vars with a message that says what to do.
#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "autograd/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

// x [...] -> x rounded to dtype, as f64
Tensor rounded(const Tensor& x, DType dtype) { return x.to(dtype).to(DType::f64); }

// Expects every element of got within one unit in the last place of dtype (8 bits of bf16, 11 of
// f16) of want: the f32 sums differ from f64's by far less than that, so only the final rounding
// may land on the neighbour.
void expect_within_one_ulp(const Tensor& got, const Tensor& want, DType dtype,
                           const std::string& what) {
  const std::vector<double> g = got.to_vector(), w = want.to_vector();
  ASSERT_EQ(g.size(), w.size()) << what;
  const int bits = dtype == DType::bf16 ? 8 : 11;
  int worst = -1;
  double worst_excess = 0;
  for (std::size_t n = 0; n < g.size(); ++n) {
    const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(w[n]), 1e-30)) - bits + 1);
    const double excess = std::fabs(g[n] - w[n]) - ulp;
    if (excess > worst_excess || std::isnan(g[n])) {
      worst_excess = excess;
      worst = static_cast<int>(n);
    }
  }
  EXPECT_EQ(worst, -1) << what << ": element " << worst << " is " << g[worst] << ", expected "
                       << w[worst];
}

TEST(Cast, ValuesAreTheTensorConversionAndTheGradientGoesBack) {
  const Tensor x0 = random({3, 5}, 1, -3, 3).to(DType::f32);
  for (const DType dtype : {DType::bf16, DType::f16, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Var x(x0, true);
    const Var y = ag::cast(x, dtype);
    EXPECT_EQ(y.dtype(), dtype);
    expect_bitwise_equal(y.value(), x0.to(dtype), "value");
    const Tensor seed = random({3, 5}, 2).to(dtype);
    y.backward(seed);
    EXPECT_EQ(x.grad().dtype(), DType::f32);
    expect_bitwise_equal(x.grad(), seed.to(DType::f32), "gradient");
  }
  // f32 -> bf16 rounds the gradient coming back from an f32 consumer.
  Var h(x0.to(DType::bf16), true);
  const Var wide = ag::cast(h, DType::f32);
  const Tensor g = random({3, 5}, 3).to(DType::f32);
  wide.backward(g);
  expect_bitwise_equal(h.grad(), g.to(DType::bf16), "rounded gradient");
  Var same(x0);
  EXPECT_EQ(ag::cast(same, DType::f32).node(), same.node());  // no node for a no-op
  EXPECT_THROW(ag::cast(same, DType::boolean), Error);
}

// c = a @ b on bf16 or f16 Vars: every element of c, da and db within one ulp of the f64 result
// on the same half values; and dtype in, dtype out.
TEST(Cast, HalfMatmulIsTheExactProductRoundedOnce) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor a64 = rounded(random({2, 7, 33}, 4), dtype);  // batched a [2, 7, 33]
    const Tensor b64 = rounded(random({33, 9}, 5), dtype);     // shared b [33, 9]
    Var a(a64.to(dtype), true), b(b64.to(dtype), true);
    const Var c = ag::matmul(a, b);
    EXPECT_EQ(c.dtype(), dtype);
    const Tensor g64 = rounded(random({2, 7, 9}, 6), dtype);
    c.backward(g64.to(dtype));
    ag::NoGrad no_grad;
    const Var A(a64), B(b64), G(g64);
    expect_within_one_ulp(c.value(), ag::matmul(A, B).value(), dtype, "c");
    expect_within_one_ulp(a.grad(), ag::matmul(G, ag::transpose(B, 0, 1)).value(), dtype, "da");
    const Var flat_a = ag::reshape(A, {-1, 33}), flat_g = ag::reshape(G, {-1, 9});
    expect_within_one_ulp(b.grad(), ag::matmul(ag::transpose(flat_a, 0, 1), flat_g).value(), dtype,
                          "db");
  }
  EXPECT_THROW(ag::matmul(Var(random({2, 3}, 7).to(DType::bf16)), Var(random({3, 2}, 8))), Error);
}

// A half Var used twice: the engine sums its two gradients (in f32, rounded once).
TEST(Cast, FanOutOfAHalfVarSumsItsGradients) {
  const Tensor x0 = random({4, 6}, 9).to(DType::f32);
  const Tensor w1 = random({6, 3}, 10).to(DType::bf16), w2 = random({6, 3}, 11).to(DType::bf16);
  Var x(x0, true);
  const Var h = ag::cast(x, DType::bf16);
  const Var y1 = ag::cast(ag::matmul(h, Var(w1)), DType::f32);
  const Var y2 = ag::cast(ag::matmul(h, Var(w2)), DType::f32);
  ag::sum(y1 + y2).backward();
  // d/dx = ones [4, 3] (W1 + W2)^T: each row the row sums of W1 and of W2, each rounded to bf16
  // (a sum of 3 exact bf16 products) before the two are added and rounded.
  for (std::int64_t d = 0; d < 6; ++d) {
    double r1 = 0, r2 = 0;
    for (std::int64_t j = 0; j < 3; ++j) {
      r1 += w1.at({d, j});
      r2 += w2.at({d, j});
    }
    const auto bf16 = [](double v) {
      return Tensor::full({}, v, DType::f64).to(DType::bf16).to_vector()[0];
    };
    const double expected = bf16(bf16(r1) + bf16(r2));
    for (std::int64_t i = 0; i < 4; ++i) EXPECT_EQ(x.grad().at({i, d}), expected) << i << " " << d;
  }
}

TEST(Autocast, MatmulEqualsTheCastsWrittenOut) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor a0 = random({5, 16}, 12).to(DType::f32), w0 = random({8, 16}, 13).to(DType::f32);
    Var a1(a0, true), w1(w0, true), a2(a0, true), w2(w0, true);
    const Tensor seed = random({5, 8}, 14).to(DType::f32);
    Var y1;
    {
      ag::Autocast autocast(dtype);
      y1 = ag::matmul(a1, ag::transpose(w1, 0, 1));  // a Linear layer's x W^T
    }
    const Var y2 = ag::cast(
        ag::matmul(ag::cast(a2, dtype), ag::cast(ag::transpose(w2, 0, 1), dtype)), DType::f32);
    EXPECT_EQ(y1.dtype(), DType::f32);
    expect_bitwise_equal(y1.value(), y2.value(), "value");
    expect_bitwise_equal(y1.value(), y1.value().to(dtype).to(DType::f32), "representable");
    y1.backward(seed);
    y2.backward(seed);
    expect_bitwise_equal(a1.grad(), a2.grad(), "da");
    expect_bitwise_equal(w1.grad(), w2.grad(), "dw");
    EXPECT_EQ(w1.grad().dtype(), DType::f32);
    // And it is close to the f32 product, as far as dtype's precision goes.
    const double tolerance = dtype == DType::bf16 ? 0.05 : 0.006;
    EXPECT_LT(
        relative_difference(y1.value(), ag::matmul(Var(a0), ag::transpose(Var(w0), 0, 1)).value()),
        tolerance);
  }
}

// Autocast's attention is the kernel's half attention on the rounded inputs, the same bits
// forward and backward, with the bias and its gradient in f32. (The kernel's half accuracy
// against the f64 reference is tested with the kernel.)
TEST(Autocast, AttentionEqualsTheKernelsHalfAttention) {
  AttentionOptions o;
  o.causal = Causal::top_left;
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor q0 = random({2, 9, 4, 16}, 15).to(DType::f32);
    const Tensor k0 = random({2, 11, 2, 16}, 16).to(DType::f32);
    const Tensor v0 = random({2, 11, 2, 16}, 17).to(DType::f32);
    const Tensor bias0 = random({1, 4, 9, 11}, 18).to(DType::f32);
    Var q(q0, true), k(k0, true), v(v0, true), bias(bias0, true);
    Var out;
    {
      ag::Autocast autocast(dtype);
      out = ag::attention(q, k, v, o, bias);
    }
    EXPECT_EQ(out.dtype(), DType::f32);
    AttentionOptions ob = o;
    ob.bias = bias0;
    const AttentionOutput half = attention_forward(q0.to(dtype), k0.to(dtype), v0.to(dtype), ob);
    expect_bitwise_equal(out.value(), half.out.to(DType::f32), "out");
    const Tensor dout = random({2, 9, 4, 16}, 19).to(DType::f32);
    out.backward(dout);
    const AttentionGrads g = attention_backward(dout.to(dtype), q0.to(dtype), k0.to(dtype),
                                                v0.to(dtype), half.out, half.lse, ob);
    expect_bitwise_equal(q.grad(), g.dq.to(DType::f32), "dq");
    expect_bitwise_equal(k.grad(), g.dk.to(DType::f32), "dk");
    expect_bitwise_equal(v.grad(), g.dv.to(DType::f32), "dv");
    expect_bitwise_equal(bias.grad(), g.dbias, "dbias (kept f32)");
    const AttentionOutput full = attention_forward(q0, k0, v0, ob);
    EXPECT_LT(relative_difference(out.value(), full.out), dtype == DType::bf16 ? 0.03 : 0.004);
  }
}

TEST(Autocast, ScopesNestPerThreadAndRefuseOtherDtypes) {
  EXPECT_FALSE(ag::autocast_dtype().has_value());
  {
    ag::Autocast outer(DType::bf16);
    EXPECT_EQ(ag::autocast_dtype(), DType::bf16);
    {
      ag::Autocast inner(DType::f16);
      EXPECT_EQ(ag::autocast_dtype(), DType::f16);
      std::optional<DType> seen = DType::bf16;
      std::thread([&] { seen = ag::autocast_dtype(); }).join();
      EXPECT_FALSE(seen.has_value());
    }
    EXPECT_EQ(ag::autocast_dtype(), DType::bf16);
    // f64 Vars are left alone: Autocast narrows f32 only.
    const Var y = ag::matmul(Var(random({2, 3}, 20)), Var(random({3, 2}, 21)));
    EXPECT_EQ(y.dtype(), DType::f64);
    EXPECT_EQ(y.value().to_vector(), y.value().to(DType::f64).to_vector());
  }
  EXPECT_FALSE(ag::autocast_dtype().has_value());
  EXPECT_THROW(ag::Autocast(DType::f32), Error);
  EXPECT_THROW(ag::Autocast(DType::f64), Error);
}

TEST(Autocast, OpsWithoutHalfSupportSayWhatToDo) {
  const Var h(random({2, 3}, 22).to(DType::bf16));
  try {
    ag::softmax(h, -1);
    ADD_FAILURE() << "softmax took a bf16 Var";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Autocast"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ag::layer_norm(h, {3}), Error);
  EXPECT_THROW(ag::relu(h), Error);
}

}  // namespace
}  // namespace qkv::testing
