// The GRU cell node: its gradients against finite differences (gradcheck), with and without
// biases; its value and gradients against the same step composed from the engine's ops (matmul,
// sigmoid, tanh, slices), which the engine differentiates on its own; a few steps chained, as an
// encoder runs it; and its errors.
#include <string>
#include <vector>

#include "autograd/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

// The step from ops: gates [N, 3H] sliced into r, z, n.
Var composed(const Var& x, const Var& h, const Var& w_ih, const Var& w_hh, const Var& b_ih,
             const Var& b_hh) {
  const std::int64_t H = h.shape()[1];
  Var gi = ag::matmul(x, ag::transpose(w_ih, 0, 1));
  Var gh = ag::matmul(h, ag::transpose(w_hh, 0, 1));
  if (b_ih.defined()) gi = gi + b_ih;
  if (b_hh.defined()) gh = gh + b_hh;
  const auto part = [&](const Var& g, std::int64_t k) {
    return ag::slice(g, 1, k * H, (k + 1) * H);
  };
  const Var r = ag::sigmoid(part(gi, 0) + part(gh, 0));
  const Var z = ag::sigmoid(part(gi, 1) + part(gh, 1));
  const Var n = ag::tanh(part(gi, 2) + r * part(gh, 2));
  return (-z + 1.0) * n + z * h;
}

TEST(GruCell, MatchesFiniteDifferences) {
  const std::int64_t N = 3, I = 4, H = 5;
  expect_gradcheck("gru_cell with biases",
                   [](const std::vector<Var>& in) {
                     return ag::gru_cell(in[0], in[1], in[2], in[3], in[4], in[5]);
                   },
                   {random({N, I}, 1), random({N, H}, 2), random({3 * H, I}, 3),
                    random({3 * H, H}, 4), random({3 * H}, 5), random({3 * H}, 6)});
  expect_gradcheck(
      "gru_cell without biases",
      [](const std::vector<Var>& in) { return ag::gru_cell(in[0], in[1], in[2], in[3]); },
      {random({N, I}, 7), random({N, H}, 8), random({3 * H, I}, 9), random({3 * H, H}, 10)});
}

// Three steps over a sequence, the state carried, sharing the weights (the chain an encoder
// builds): value and every gradient as the composed ops give them.
TEST(GruCell, ChainedStepsEqualTheComposedOps) {
  const std::int64_t N = 2, I = 3, H = 4, steps = 3;
  const Tensor w_ih0 = random({3 * H, I}, 11), w_hh0 = random({3 * H, H}, 12);
  const Tensor b_ih0 = random({3 * H}, 13), b_hh0 = random({3 * H}, 14), h00 = random({N, H}, 15);
  std::vector<Tensor> xs;
  for (std::int64_t t = 0; t < steps; ++t) xs.push_back(random({N, I}, 16 + t));
  struct Run {
    Var w_ih, w_hh, b_ih, b_hh, h0;
    Tensor out;
  };
  const auto run = [&](bool node) {
    Run r{Var(w_ih0, true), Var(w_hh0, true), Var(b_ih0, true),
          Var(b_hh0, true), Var(h00, true),   Tensor()};
    Var h = r.h0;
    for (const Tensor& x : xs) {
      h = node ? ag::gru_cell(Var(x), h, r.w_ih, r.w_hh, r.b_ih, r.b_hh)
               : composed(Var(x), h, r.w_ih, r.w_hh, r.b_ih, r.b_hh);
    }
    ag::sum(h * h).backward();
    r.out = h.value();
    return r;
  };
  const Run a = run(true), b = run(false);
  EXPECT_LT(relative_difference(a.out, b.out), 1e-14);
  EXPECT_LT(relative_difference(a.w_ih.grad(), b.w_ih.grad()), 1e-13);
  EXPECT_LT(relative_difference(a.w_hh.grad(), b.w_hh.grad()), 1e-13);
  EXPECT_LT(relative_difference(a.b_ih.grad(), b.b_ih.grad()), 1e-13);
  EXPECT_LT(relative_difference(a.b_hh.grad(), b.b_hh.grad()), 1e-13);
  EXPECT_LT(relative_difference(a.h0.grad(), b.h0.grad()), 1e-13);
}

// f32 Vars compute in f32, within f32 rounding of the f64 step.
TEST(GruCell, F32FollowsF64) {
  const Tensor x = random({2, 3}, 21), h = random({2, 4}, 22), wi = random({12, 3}, 23),
               wh = random({12, 4}, 24);
  const Var y = ag::gru_cell(Var(x.to(DType::f32)), Var(h.to(DType::f32)), Var(wi.to(DType::f32)),
                             Var(wh.to(DType::f32)));
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_LT(relative_difference(y.value(), ag::gru_cell(Var(x), Var(h), Var(wi), Var(wh)).value()),
            1e-6);
}

TEST(GruCell, BadArgumentsNameThemselves) {
  const Var x(random({2, 3}, 1)), h(random({2, 4}, 2)), wi(random({12, 3}, 3)),
      wh(random({12, 4}, 4)), b(random({12}, 5));
  const auto expect_argument = [](const std::string& argument, const auto& call) {
    try {
      call();
      ADD_FAILURE() << "no error for " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  };
  expect_argument("x", [&] { ag::gru_cell(Var(random({2, 3, 1}, 1)), h, wi, wh); });
  expect_argument("h", [&] { ag::gru_cell(x, Var(random({3, 4}, 2)), wi, wh); });
  expect_argument("h", [&] { ag::gru_cell(x, Var(random({2, 4}, 2).to(DType::f32)), wi, wh); });
  expect_argument("w_ih", [&] { ag::gru_cell(x, h, Var(random({12, 2}, 3)), wh); });
  expect_argument("w_hh", [&] { ag::gru_cell(x, h, wi, Var(random({11, 4}, 4))); });
  expect_argument("w_hh", [&] { ag::gru_cell(x, h, wi, Var()); });
  expect_argument("b_ih", [&] { ag::gru_cell(x, h, wi, wh, Var(random({4}, 5))); });
  expect_argument("b_hh", [&] { ag::gru_cell(x, h, wi, wh, b, Var(random({12, 1}, 6))); });
  expect_argument("x", [&] { ag::gru_cell(Var(random({2, 3}, 1).to(DType::bf16)), h, wi, wh); });
}

}  // namespace
}  // namespace qkv::testing
