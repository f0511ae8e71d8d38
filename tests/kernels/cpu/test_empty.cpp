// Empty problems (docs/numerics.md): B = 0, Tq = 0 or Tk = 0 are valid and give outputs of their
// shapes; with Tq, B > 0 and Tk = 0 every row is fully masked: out 0, lse -inf, dq 0. Every
// backend and the autodiff primitive agree, with every option that can be given. Head dims and
// head counts of 0 are refused with a qkv::Error that names the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "qkv/qkv.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

struct EmptyCase {
  std::int64_t B, Tq, Tk;
};

std::string describe(const EmptyCase& c) {
  return "B " + std::to_string(c.B) + " Tq " + std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk);
}

// Every option at once (lengths only where there is a batch).
AttentionOptions all_options(const EmptyCase& c, Generator& g, Backend backend) {
  AttentionOptions o;
  o.backend = backend;
  o.causal = Causal::bottom_right;
  o.window = {3, 1};
  o.key_lengths.assign(static_cast<std::size_t>(c.B), c.Tk);
  o.query_lengths.assign(static_cast<std::size_t>(c.B), c.Tq);
  o.mask = Tensor::full({c.B, 1, c.Tq, c.Tk}, 1.0, DType::boolean);
  o.bias = Tensor::randn({4, c.Tq, c.Tk}, g);
  o.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
  o.softcap = 5.0;
  o.dropout_p = 0.2;
  o.seed = 3;
  return o;
}

bool all_equal(const Tensor& t, double value) {
  for (const double x : t.to_vector()) {
    if (!(x == value)) return false;
  }
  return true;
}

TEST(EmptyProblems, EveryBackendGivesShapedEmptyOrMaskedResults) {
  const EmptyCase cases[] = {{0, 5, 7}, {2, 0, 7}, {2, 5, 0}, {0, 0, 0}, {3, 0, 0}};
  for (const EmptyCase& c : cases) {
    for (const Backend backend : {Backend::reference, Backend::cpu}) {
      for (const DType dtype : {DType::f32, DType::f64}) {
        for (const bool options : {false, true}) {
          SCOPED_TRACE(describe(c) + (backend == Backend::cpu ? " cpu " : " reference ") +
                       std::string(dtype_name(dtype)) + (options ? " every option" : ""));
          Generator g(1);
          const Tensor q = Tensor::randn({c.B, c.Tq, 4, 8}, g, dtype);
          const Tensor k = Tensor::randn({c.B, c.Tk, 2, 8}, g, dtype);
          const Tensor v = Tensor::randn({c.B, c.Tk, 2, 6}, g, dtype);
          AttentionOptions o;
          o.backend = backend;
          if (options) o = all_options(c, g, backend);
          const AttentionOutput f = attention_forward(q, k, v, o);
          EXPECT_EQ(f.out.shape(), (Shape{c.B, c.Tq, 4, 6}));
          EXPECT_EQ(f.lse.shape(), (Shape{c.B, 4, c.Tq}));
          EXPECT_TRUE(all_equal(f.out, 0.0));
          EXPECT_TRUE(all_equal(f.lse, -std::numeric_limits<double>::infinity()));
          const Tensor dout = Tensor::randn(f.out.shape(), g, dtype);
          const AttentionGrads grads = attention_backward(dout, q, k, v, f.out, f.lse, o);
          EXPECT_EQ(grads.dq.shape(), q.shape());
          EXPECT_EQ(grads.dk.shape(), k.shape());
          EXPECT_EQ(grads.dv.shape(), v.shape());
          for (const Tensor* t : {&grads.dq, &grads.dk, &grads.dv}) EXPECT_TRUE(all_equal(*t, 0.0));
          if (options) {
            EXPECT_EQ(grads.dbias.shape(), o.bias.shape());
            EXPECT_TRUE(all_equal(grads.dbias, 0.0));
          }
          const Tensor p = attention_weights(q, k, o);
          EXPECT_EQ(p.shape(), (Shape{c.B, 4, c.Tq, c.Tk}));
          EXPECT_TRUE(all_equal(p, 0.0));
        }
      }
    }
  }
}

TEST(EmptyProblems, TheAutodiffPrimitiveAndTheComposedOpsAgree) {
  const EmptyCase cases[] = {{0, 5, 7}, {2, 0, 7}, {2, 5, 0}};
  for (const EmptyCase& c : cases) {
    SCOPED_TRACE(describe(c));
    Generator g(2);
    const auto leaf = [&](Shape shape) {
      return ag::Var(Tensor::randn(std::move(shape), g, DType::f64), true);
    };
    AttentionOptions o;
    o.causal = Causal::bottom_right;
    for (const bool composed : {false, true}) {
      const ag::Var q = leaf({c.B, c.Tq, 2, 4}), k = leaf({c.B, c.Tk, 2, 4}),
                    v = leaf({c.B, c.Tk, 2, 3});
      const ag::Var out =
          composed ? ag::attention_decomposed(q, k, v, o) : ag::attention(q, k, v, o);
      EXPECT_EQ(out.value().shape(), (Shape{c.B, c.Tq, 2, 3}));
      EXPECT_TRUE(all_equal(out.value(), 0.0));
      ag::sum(out).backward();
      for (const ag::Var* x : {&q, &k, &v}) {
        EXPECT_EQ(x->grad().shape(), x->value().shape());
        EXPECT_TRUE(all_equal(x->grad(), 0.0));
      }
    }
  }
}

TEST(EmptyProblems, ZeroHeadsOrHeadDimsAreErrorsNamingTheArgument) {
  Generator g(3);
  const auto expect_error = [](const Tensor& q, const Tensor& k, const Tensor& v,
                               const std::string& argument, const std::string& text) {
    try {
      attention_forward(q, k, v);
      ADD_FAILURE() << "expected an error about " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument);
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_error(Tensor::randn({1, 3, 2, 0}, g), Tensor::randn({1, 3, 2, 0}, g),
               Tensor::randn({1, 3, 2, 4}, g), "q", "head dim at least 1");
  expect_error(Tensor::randn({1, 3, 2, 4}, g), Tensor::randn({1, 3, 2, 4}, g),
               Tensor::randn({1, 3, 2, 0}, g), "v", "head dim at least 1");
  expect_error(Tensor::randn({1, 3, 0, 4}, g), Tensor::randn({1, 3, 2, 4}, g),
               Tensor::randn({1, 3, 2, 4}, g), "q", "at least 1 head");
  expect_error(Tensor::randn({1, 3, 2, 4}, g), Tensor::randn({1, 3, 0, 4}, g),
               Tensor::randn({1, 3, 0, 4}, g), "k", "divides Hq");
}

}  // namespace
}  // namespace qkv::testing
