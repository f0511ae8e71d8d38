// Attention two ways: the primitive (the kernel's forward and backward) and attention_decomposed
// (matmul, scale, masked_fill, softmax, dropout, matmul, differentiated by the engine) give the
// same loss and the same gradients, to 1e-10 in f64, inside a self-attention block and a cross
// attention block, for every option; and both match finite differences.
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

constexpr double kAgree = 1e-10;

struct BlockCase {
  std::string name;
  std::int64_t B = 2, Tq = 5, Tk = 5, Hq = 2, Hk = 2, D = 4, Dv = 4, E = 6;
  bool cross = false;            // keys and values from Y [B, Tk, E + 1], queries from X [B, Tq, E]
  Shape bias_shape = {2, 5, 5};  // the learned bias; empty = none
  AttentionOptions options;      // without the learned bias

  std::string describe() const {
    std::ostringstream s;
    s << name << ": B=" << B << " Tq=" << Tq << " Tk=" << Tk << " Hq=" << Hq << " Hk=" << Hk
      << " D=" << D << " Dv=" << Dv << " E=" << E << (cross ? " cross" : " self")
      << " bias=" << (bias_shape.empty() ? "none" : shape_string(bias_shape));
    const AttentionOptions& o = options;
    if (o.scale) s << " scale=" << *o.scale;
    if (o.causal != Causal::none) {
      s << " causal=" << (o.causal == Causal::top_left ? "top_left" : "bottom_right");
    }
    if (o.window.left >= 0 || o.window.right >= 0) {
      s << " window={" << o.window.left << "," << o.window.right << "}";
    }
    const auto list = [&](const char* name, const auto& v) {
      if (v.empty()) return;
      s << " " << name << "={";
      for (std::size_t n = 0; n < v.size(); ++n) s << (n ? "," : "") << v[n];
      s << "}";
    };
    list("key_lengths", o.key_lengths);
    list("query_lengths", o.query_lengths);
    list("alibi", o.alibi_slopes);
    if (o.mask.defined()) s << " mask=" << shape_string(o.mask.shape());
    if (o.bias.defined()) s << " constant_bias=" << shape_string(o.bias.shape());
    if (o.softcap > 0) s << " softcap=" << o.softcap;
    if (o.dropout_p > 0) s << " dropout=" << o.dropout_p << " seed=" << o.seed;
    if (o.backend == Backend::reference) s << " backend=reference";
    return s.str();
  }
};

// A boolean mask of `shape`, about 70% kept, drawn from the seed.
Tensor random_mask(const Shape& shape, std::uint64_t seed) {
  std::vector<double> bits;
  for (const double u : random(shape, seed, 0, 1).to_vector()) bits.push_back(u < 0.7);
  return Tensor::from_values(shape, bits, DType::boolean);
}

std::vector<BlockCase> block_cases() {
  std::vector<BlockCase> cases;
  const auto add = [&](std::string name, auto&& edit) {
    BlockCase c;
    c.name = std::move(name);
    edit(c);
    if (!c.bias_shape.empty() && c.bias_shape.size() == 3) c.bias_shape = {c.Hq, c.Tq, c.Tk};
    cases.push_back(c);
  };
  add("plain", [](BlockCase&) {});
  add("no bias", [](BlockCase& c) { c.bias_shape = {}; });
  add("scale", [](BlockCase& c) { c.options.scale = 0.8; });
  add("causal top_left", [](BlockCase& c) { c.options.causal = Causal::top_left; });
  add("causal top_left cross Tq<Tk", [](BlockCase& c) {
    c.cross = true, c.Tq = 4, c.Tk = 7, c.options.causal = Causal::top_left;
  });
  add("causal bottom_right cross Tq<Tk", [](BlockCase& c) {
    c.cross = true, c.Tq = 4, c.Tk = 7, c.options.causal = Causal::bottom_right;
  });
  add("causal bottom_right cross Tq>Tk (first rows see no key)", [](BlockCase& c) {
    c.cross = true, c.Tq = 6, c.Tk = 3, c.options.causal = Causal::bottom_right;
  });
  add("causal top_left cross Tq>Tk", [](BlockCase& c) {
    c.cross = true, c.Tq = 6, c.Tk = 3, c.options.causal = Causal::top_left;
  });
  add("window", [](BlockCase& c) { c.options.window = {1, 1}; });
  add("window left only, cross", [](BlockCase& c) {
    c.cross = true, c.Tq = 4, c.Tk = 6, c.options.window = {2, 0};
  });
  add("key_lengths", [](BlockCase& c) { c.options.key_lengths = {3, 5}; });
  add("key_lengths with an empty batch", [](BlockCase& c) { c.options.key_lengths = {0, 4}; });
  add("query_lengths", [](BlockCase& c) {
    c.cross = true, c.Tk = 6, c.options.query_lengths = {2, 5}, c.options.key_lengths = {6, 3};
  });
  add("bool mask [B, 1, Tq, Tk]", [](BlockCase& c) {
    c.options.mask = random_mask({2, 1, 5, 5}, 7);
  });
  add("bool mask [Tk]", [](BlockCase& c) {
    c.options.mask = Tensor::from_values({5}, {1, 0, 1, 1, 0}, DType::boolean);
  });
  add("bool mask with fully masked rows", [](BlockCase& c) {
    Tensor m = Tensor::full({2, 2, 5, 5}, 1.0, DType::boolean);
    for (std::int64_t j = 0; j < 5; ++j) m.set({0, 1, 2, j}, 0), m.set({1, 0, 4, j}, 0);
    c.options.mask = m;
  });
  add("bias [B, 1, 1, Tk]", [](BlockCase& c) { c.bias_shape = {2, 1, 1, 5}; });
  add("bias [Tq, Tk]", [](BlockCase& c) { c.bias_shape = {5, 5}; });
  add("bias [B, Hq, Tq, Tk]", [](BlockCase& c) { c.bias_shape = {2, 2, 5, 5}; });
  add("constant bias in options", [](BlockCase& c) {
    c.bias_shape = {};
    c.options.bias = random({1, 2, 5, 5}, 8);
  });
  add("alibi", [](BlockCase& c) { c.options.alibi_slopes = {0.5, 0.25}; });
  add("alibi cross with lengths", [](BlockCase& c) {
    c.cross = true, c.Tq = 3, c.Tk = 6, c.options.alibi_slopes = {0.7, 0.1};
    c.options.key_lengths = {4, 6}, c.options.query_lengths = {3, 2};
  });
  add("softcap", [](BlockCase& c) { c.options.softcap = 0.6; });
  add("dropout 0.3", [](BlockCase& c) { c.options.dropout_p = 0.3, c.options.seed = 11; });
  add("dropout 0.6 offset", [](BlockCase& c) {
    c.options.dropout_p = 0.6, c.options.seed = 1ull << 40 | 3, c.options.offset = 1ull << 35 | 9;
  });
  add("GQA", [](BlockCase& c) { c.Hq = 4, c.Hk = 2; });
  add("MQA", [](BlockCase& c) { c.Hq = 3, c.Hk = 1; });
  add("cross attention", [](BlockCase& c) { c.cross = true, c.Tq = 3, c.Tk = 7; });
  add("Dv != D", [](BlockCase& c) { c.D = 3, c.Dv = 5; });
  add("composed", [](BlockCase& c) {
    c.cross = true, c.B = 3, c.Tq = 5, c.Tk = 7, c.Hq = 4, c.Hk = 2, c.D = 3, c.Dv = 2;
    c.options.causal = Causal::bottom_right, c.options.window = {3, 1};
    c.options.key_lengths = {7, 4, 0}, c.options.query_lengths = {5, 3, 2};
    c.options.mask = random_mask({5, 7}, 12), c.options.alibi_slopes = {0.3, 0.2, 0.1, 0.05};
    c.options.softcap = 1.2, c.options.dropout_p = 0.2, c.options.seed = 5;
    c.options.scale = 0.9;
    c.bias_shape = {3, 1, 5, 7};
  });
  add("composed, reference backend", [](BlockCase& c) {
    c.B = 2, c.Hq = 4, c.Hk = 1, c.D = 5, c.Dv = 3;
    c.options.causal = Causal::top_left, c.options.key_lengths = {4, 5};
    c.options.mask = random_mask({2, 4, 5, 5}, 13), c.options.alibi_slopes = {1, 0.5, 0.25, 0.1};
    c.options.softcap = 0.8, c.options.dropout_p = 0.4, c.options.seed = 9;
    c.options.backend = Backend::reference;
  });
  return cases;
}

using AttentionFn = Var (*)(const Var&, const Var&, const Var&, const AttentionOptions&,
                            const Var&);

struct Block {
  std::vector<Var> params;  // X, Y (cross only), W_Q, W_K, W_V, W_O, bias (when learned)
  std::vector<std::string> names;
  Var loss;
};

// X -> Q, K, V projections -> attention -> W_O, loss = sum(out * R).
Block run_block(const BlockCase& c, AttentionFn attention) {
  Block b;
  const std::int64_t Ey = c.cross ? c.E + 1 : c.E;
  std::uint64_t seed = 1000;
  const auto param = [&](const char* name, const Shape& shape) {
    b.names.push_back(name);
    b.params.emplace_back(random(shape, seed++), true);
    return b.params.back();
  };
  const Var x = param("X", {c.B, c.Tq, c.E});
  const Var y = c.cross ? param("Y", {c.B, c.Tk, Ey}) : x;
  const Var wq = param("W_Q", {c.E, c.Hq * c.D});
  const Var wk = param("W_K", {Ey, c.Hk * c.D});
  const Var wv = param("W_V", {Ey, c.Hk * c.Dv});
  const Var wo = param("W_O", {c.Hq * c.Dv, c.E});
  const Var bias = c.bias_shape.empty() ? Var() : param("bias", c.bias_shape);
  const Var q = ag::split_heads(ag::matmul(x, wq), c.Hq);  // [B, Tq, Hq, D]
  const Var k = ag::split_heads(ag::matmul(y, wk), c.Hk);  // [B, Tk, Hk, D]
  const Var v = ag::split_heads(ag::matmul(y, wv), c.Hk);  // [B, Tk, Hk, Dv]
  const Var o = attention(q, k, v, c.options, bias);       // [B, Tq, Hq, Dv]
  const Var out = ag::matmul(ag::merge_heads(o), wo);      // [B, Tq, E]
  b.loss = ag::sum(out * Var(random({c.B, c.Tq, c.E}, 77)));
  b.loss.backward();
  return b;
}

class AttentionTwoWays : public ::testing::TestWithParam<BlockCase> {};

TEST_P(AttentionTwoWays, GradientsAgree) {
  const BlockCase& c = GetParam();
  std::cout << "[ case ] " << c.describe() << "\n";
  SCOPED_TRACE(c.describe());
  const Block primitive = run_block(c, &ag::attention);
  const Block decomposed = run_block(c, &ag::attention_decomposed);
  const double loss_p = primitive.loss.value().at({}), loss_d = decomposed.loss.value().at({});
  EXPECT_FALSE(std::isnan(loss_p));
  EXPECT_NEAR(loss_p, loss_d, kAgree * std::max(1.0, std::fabs(loss_d)));
  for (std::size_t n = 0; n < primitive.params.size(); ++n) {
    const Tensor& gp = primitive.params[n].grad();
    const Tensor& gd = decomposed.params[n].grad();
    ASSERT_TRUE(gp.defined() && gd.defined()) << primitive.names[n];
    EXPECT_EQ(gp.shape(), primitive.params[n].shape()) << primitive.names[n];
    const double difference = relative_difference(gp, gd);
    double largest = 0;
    for (const double g : gd.to_vector()) largest = std::max(largest, std::fabs(g));
    std::cout << "  d" << primitive.names[n]
              << ": max |primitive - decomposed| / max(1, |g|) = " << difference
              << " (max |g| = " << largest << ")\n";
    EXPECT_LE(difference, kAgree) << "d" << primitive.names[n];
    // Gradients that vanish everywhere would agree trivially.
    EXPECT_GT(largest, 1e-3) << "d" << primitive.names[n];
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOption, AttentionTwoWays, ::testing::ValuesIn(block_cases()),
                         [](const ::testing::TestParamInfo<BlockCase>& info) {
                           std::string name;
                           for (const char ch : info.param.name) {
                             name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           }
                           return std::to_string(info.index) + "_" + name;
                         });

// The comparison above can fail: options that differ only in the dropout seed, or in the causal
// alignment when Tq != Tk, give gradients far apart.
TEST(AttentionTwoWaysSensitivity, MismatchedOptionsDisagree) {
  BlockCase a;
  a.name = "dropout seed 11 against 12";
  a.options.dropout_p = 0.3, a.options.seed = 11;
  BlockCase b = a;
  b.options.seed = 12;
  BlockCase c;
  c.name = "causal top_left against bottom_right";
  c.cross = true, c.Tq = 4, c.Tk = 7, c.bias_shape = {};
  c.options.causal = Causal::top_left;
  BlockCase d = c;
  d.options.causal = Causal::bottom_right;
  for (const auto& [one, other] : {std::pair{a, b}, std::pair{c, d}}) {
    SCOPED_TRACE(one.describe() + " / " + other.describe());
    const Block primitive = run_block(one, &ag::attention);
    const Block decomposed = run_block(other, &ag::attention_decomposed);
    EXPECT_GT(relative_difference(primitive.params[0].grad(), decomposed.params[0].grad()), 1e-3);
  }
}

// Both forms against finite differences on q, k, v and the bias directly, every option on.
TEST(AttentionGradcheck, BothFormsMatchFiniteDifferences) {
  AttentionOptions o;
  o.causal = Causal::bottom_right;
  o.window = {2, 1};
  o.key_lengths = {5, 3};
  o.mask = random_mask({4, 5}, 21);
  o.alibi_slopes = {0.4, 0.2};
  o.softcap = 0.9;
  o.dropout_p = 0.25;
  o.seed = 17;
  const std::vector<Tensor> inputs = {random({2, 4, 2, 3}, 22), random({2, 5, 1, 3}, 23),
                                      random({2, 5, 1, 2}, 24), random({2, 1, 4, 5}, 25)};
  for (const auto& [name, fn] : std::vector<std::pair<std::string, AttentionFn>>{
           {"attention", &ag::attention}, {"attention_decomposed", &ag::attention_decomposed}}) {
    expect_gradcheck(
        name, [fn, o](const std::vector<Var>& v) { return fn(v[0], v[1], v[2], o, v[3]); }, inputs);
  }
}

// A row whose keys are all dropped: out 0 and zero gradients, never NaN, in both forms.
TEST(AttentionMaskedRows, GiveZeroOutputAndZeroGradient) {
  AttentionOptions o;
  o.key_lengths = {0, 3};
  o.query_lengths = {4, 2};
  for (const AttentionFn fn : {&ag::attention, &ag::attention_decomposed}) {
    Var q(random({2, 4, 2, 3}, 31), true), k(random({2, 3, 2, 3}, 32), true),
        v(random({2, 3, 2, 3}, 33), true);
    const Var out = fn(q, k, v, o, {});
    ag::sum(out * Var(random({2, 4, 2, 3}, 34))).backward();
    for (std::int64_t i = 0; i < 4; ++i) {
      for (std::int64_t h = 0; h < 2; ++h) {
        for (std::int64_t d = 0; d < 3; ++d) {
          const bool empty = i >= 2;  // batch 0 has no keys; batch 1 no queries from i = 2
          EXPECT_EQ(out.value().at({0, i, h, d}), 0.0);
          EXPECT_EQ(q.grad().at({0, i, h, d}), 0.0);
          if (empty) {
            EXPECT_EQ(out.value().at({1, i, h, d}), 0.0);
            EXPECT_EQ(q.grad().at({1, i, h, d}), 0.0);
          }
        }
      }
    }
    for (const Var& x : {q, k, v}) {
      for (const double g : x.grad().to_vector()) EXPECT_FALSE(std::isnan(g));
    }
    EXPECT_NE(q.grad().at({1, 0, 0, 0}), 0.0);
  }
}

TEST(AttentionErrors, NameTheArgument) {
  const Var q(random({1, 2, 2, 3}, 41)), k(random({1, 2, 2, 3}, 42)), v(random({1, 2, 2, 3}, 43));
  AttentionOptions o;
  o.bias = random({2, 2}, 44);
  for (const AttentionFn fn : {&ag::attention, &ag::attention_decomposed}) {
    try {
      fn(q, k, v, o, Var(random({2, 2}, 45)));
      FAIL() << "both biases given";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "bias");
    }
    try {
      fn(q, Var(random({1, 2, 2, 4}, 46)), v, {}, {});
      FAIL() << "head dim mismatch";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "k");
    }
  }
}

}  // namespace
}  // namespace qkv::testing
