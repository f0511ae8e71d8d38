// Optimizers against their update rules written out by hand for a few steps, clipping, the
// schedule, and weights through safetensors files.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "nn/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

// A leaf and, for each step, the gradient to give it.
struct Problem {
  Var p = Var(Tensor::from_values({3}, {0.5, -1.0, 2.0}, DType::f64), true);
  std::vector<std::vector<double>> grads = {{0.1, -0.2, 0.3}, {-0.4, 0.5, 0.0}, {0.2, 0.2, -0.7}};
  // Sets p's gradient to grads[step] through backward of sum(p * g).
  void backward(std::size_t step) {
    p.zero_grad();
    ag::sum(p * Var(Tensor::from_values({3}, grads[step], DType::f64))).backward();
  }
};

TEST(Sgd, MomentumNesterovWeightDecayFollowPyTorchsRule) {
  for (const bool nesterov : {false, true}) {
    Problem pr;
    nn::SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    o.nesterov = nesterov;
    nn::Sgd sgd({pr.p}, o);
    std::vector<double> p = {0.5, -1.0, 2.0}, buf(3);
    for (std::size_t s = 0; s < 3; ++s) {
      pr.backward(s);
      sgd.step();
      for (int n = 0; n < 3; ++n) {
        const double g = pr.grads[s][n] + 0.01 * p[n];
        buf[n] = s == 0 ? g : 0.9 * buf[n] + g;
        p[n] -= 0.1 * (nesterov ? g + 0.9 * buf[n] : buf[n]);
        EXPECT_NEAR(pr.p.value().at({n}), p[n], 1e-15) << "step " << s << " nesterov " << nesterov;
      }
    }
  }
  Problem plain;
  nn::SgdOptions o;
  o.lr = 0.5;
  nn::Sgd sgd({plain.p}, o);
  plain.backward(0);
  sgd.step();
  EXPECT_DOUBLE_EQ(plain.p.value().at({2}), 2.0 - 0.5 * 0.3);
}

TEST(AdamW, BiasCorrectionAndDecoupledWeightDecayFollowPyTorchsRule) {
  Problem pr;
  nn::AdamWOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.1;
  nn::AdamW adam({pr.p}, o);
  std::vector<double> p = {0.5, -1.0, 2.0}, m(3), v(3);
  for (std::size_t s = 0; s < 3; ++s) {
    pr.backward(s);
    adam.step();
    const double t = static_cast<double>(s + 1);
    for (int n = 0; n < 3; ++n) {
      const double g = pr.grads[s][n];
      p[n] -= 0.01 * 0.1 * p[n];
      m[n] = 0.9 * m[n] + 0.1 * g;
      v[n] = 0.999 * v[n] + 0.001 * g * g;
      const double m_hat = m[n] / (1 - std::pow(0.9, t)), v_hat = v[n] / (1 - std::pow(0.999, t));
      p[n] -= 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8);
      EXPECT_NEAR(pr.p.value().at({n}), p[n], 1e-12) << "step " << s;
    }
  }
  // The first step moves every parameter with a non-zero gradient by about lr (|m_hat /
  // sqrt(v_hat)| = 1).
  Problem first;
  nn::AdamW a2({first.p}, {.lr = 0.01, .weight_decay = 0.0});
  first.backward(0);
  a2.step();
  EXPECT_NEAR(first.p.value().at({0}), 0.5 - 0.01, 1e-9);
}

// The options torch.optim refuses ("Invalid learning rate", "Invalid beta parameter", ...) are
// qkv::Errors naming the option, NaN included: a beta of 1 would divide by 1 - 1^t = 0, a
// negative max_norm would flip every gradient.
TEST(Optimizers, RefuseTheOptionsPyTorchRefuses) {
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Problem pr;
  const std::vector<Var> ps = {pr.p};
  const double nan = std::nan("");
  EXPECT_EQ(message([&] { nn::Sgd(ps, {.lr = -0.1}); }),
            "options.lr: expected a learning rate >= 0, got -0.1");
  EXPECT_EQ(message([&] { nn::Sgd(ps, {.lr = nan}); }),
            "options.lr: expected a learning rate >= 0, got nan");
  EXPECT_EQ(message([&] { nn::Sgd(ps, {.momentum = -1}); }),
            "options.momentum: expected a number >= 0, got -1");
  EXPECT_EQ(message([&] { nn::Sgd(ps, {.weight_decay = -1}); }),
            "options.weight_decay: expected a number >= 0, got -1");
  EXPECT_EQ(message([&] { nn::AdamW(ps, {.lr = -1}); }),
            "options.lr: expected a learning rate >= 0, got -1");
  EXPECT_EQ(message([&] { nn::AdamW(ps, {.beta1 = 1}); }),
            "options.beta1: expected a number in [0, 1), got 1");
  EXPECT_EQ(message([&] { nn::AdamW(ps, {.beta2 = nan}); }),
            "options.beta2: expected a number in [0, 1), got nan");
  EXPECT_EQ(message([&] { nn::AdamW(ps, {.eps = -1e-8}); }),
            "options.eps: expected a number >= 0, got -1e-08");
  EXPECT_EQ(message([&] { nn::AdamW(ps, {.weight_decay = -0.5}); }),
            "options.weight_decay: expected a number >= 0, got -0.5");
  pr.backward(0);
  EXPECT_EQ(message([&] { nn::clip_grad_norm(ps, -1); }),
            "max_norm: expected a number >= 0, got -1");
  EXPECT_EQ(pr.p.grad().to_vector(), (std::vector<double>{0.1, -0.2, 0.3}));  // untouched
}

TEST(ClipGradNorm, ScalesToTheGlobalNorm) {
  Var a(Tensor::from_values({2}, {0, 0}, DType::f64), true);
  Var b(Tensor::from_values({1}, {0}, DType::f64), true);
  (ag::sum(a * Var(Tensor::from_values({2}, {3, 4}, DType::f64))) +
   ag::sum(b * Var(Tensor::from_values({1}, {12}, DType::f64))))
      .backward();
  const double norm = nn::clip_grad_norm({a, b}, 6.5);  // sqrt(9 + 16 + 144) = 13
  EXPECT_DOUBLE_EQ(norm, 13);
  const double c = 6.5 / (13 + 1e-6);
  EXPECT_NEAR(a.grad().at({1}), 4 * c, 1e-15);
  EXPECT_NEAR(b.grad().at({0}), 12 * c, 1e-15);
  EXPECT_NEAR(nn::clip_grad_norm({a, b}, 100), 6.5, 1e-5);  // below max: unchanged
  EXPECT_NEAR(b.grad().at({0}), 12 * c, 1e-15);
}

// The loss is scaled, the gradients unscaled exactly (the scale a power of 2), an inf or NaN
// gradient reported (and the scale backed off), and the scale grown after growth_interval finite
// steps in a row, as torch.amp.GradScaler.
TEST(GradScaler, ScalesUnscalesAndAdaptsToOverflow) {
  nn::GradScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  nn::GradScaler scaler(o);
  Problem problem;
  problem.p.zero_grad();
  const Var loss = ag::sum(problem.p * Var(Tensor::from_values({3}, problem.grads[0], DType::f64)));
  const Var scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.value().to_vector()[0], 1024 * loss.value().to_vector()[0]);
  scaled.backward();
  EXPECT_EQ(problem.p.grad().to_vector()[0], 1024 * 0.1);
  EXPECT_TRUE(scaler.unscale({problem.p}));
  EXPECT_EQ(problem.p.grad().to_vector(), problem.grads[0]);
  for (int step = 0; step < 2; ++step) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.update(false);  // the third finite step in a row
  EXPECT_EQ(scaler.scale(), 2048);

  for (const double bad : {INFINITY, NAN}) {
    problem.p.zero_grad();
    ag::sum(problem.p * Var(Tensor::from_values({3}, {1.0, bad, 1.0}, DType::f64))).backward();
    EXPECT_FALSE(scaler.unscale({problem.p}));
  }
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.update(false);
  scaler.update(false);
  scaler.update(true);  // resets the count of finite steps
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 512);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 1024);

  const auto refused = [](auto set) {
    nn::GradScalerOptions bad;
    set(bad);
    EXPECT_THROW(nn::GradScaler{bad}, Error);
  };
  refused([](nn::GradScalerOptions& b) { b.init_scale = 0; });
  refused([](nn::GradScalerOptions& b) { b.init_scale = NAN; });
  refused([](nn::GradScalerOptions& b) { b.growth_factor = 1; });
  refused([](nn::GradScalerOptions& b) { b.backoff_factor = 1; });
  refused([](nn::GradScalerOptions& b) { b.backoff_factor = 0; });
  refused([](nn::GradScalerOptions& b) { b.growth_interval = 0; });
}

TEST(WarmupCosine, RisesLinearlyThenFollowsTheCosine) {
  EXPECT_EQ(nn::warmup_cosine_lr(0, 1.0, 10, 110), 0.0);
  EXPECT_DOUBLE_EQ(nn::warmup_cosine_lr(5, 1.0, 10, 110), 0.5);
  EXPECT_DOUBLE_EQ(nn::warmup_cosine_lr(10, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(nn::warmup_cosine_lr(60, 1.0, 10, 110), 0.5, 1e-15);  // half-way: cos(pi/2)
  EXPECT_NEAR(nn::warmup_cosine_lr(35, 2.0, 10, 110, 0.2), 0.2 + 1.8 * (1 + std::cos(M_PI / 4)) / 2,
              1e-15);
  EXPECT_DOUBLE_EQ(nn::warmup_cosine_lr(110, 1.0, 10, 110, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(nn::warmup_cosine_lr(500, 1.0, 10, 110, 0.1), 0.1);
  EXPECT_THROW(nn::warmup_cosine_lr(0, 1.0, 10, 10), Error);
}

TEST(Training, AdamWLowersTheLossOfAnEncoderLayer) {
  nn::TransformerLayerConfig c;
  c.d_model = 16;
  c.nhead = 4;
  c.dim_feedforward = 32;
  c.dropout = 0.0;
  Generator gen(9);
  nn::TransformerEncoderLayer layer(c, gen);
  const Tensor x = Tensor::randn({4, 6, 16}, gen), target = Tensor::randn({4, 6, 16}, gen);
  nn::AdamW adam(layer.parameters(), {.lr = 3e-3});
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    adam.zero_grad();
    const Var d = layer.forward(Var(x)) - Var(target);
    const Var loss = ag::mean(d * d);
    loss.backward();
    nn::clip_grad_norm(layer.parameters(), 1.0);
    adam.step();
    (step == 0 ? first : last) = loss.value().at({});
  }
  EXPECT_LT(last, 0.8 * first);
}

TEST(SaveLoad, RoundTripsEveryParameterAndRefusesMismatches) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("qkv_nn_" + std::to_string(::getpid()) + ".safetensors");
  nn::TransformerLayerConfig c;
  c.d_model = 8;
  c.nhead = 2;
  c.dim_feedforward = 16;
  Generator g1(1), g2(2);
  nn::TransformerDecoderLayer a(c, g1), b(c, g2);
  nn::save_module(a, path);
  const SafetensorsContents file = load_safetensors(path);
  EXPECT_EQ(file.tensors.size(), a.named_parameters().size());
  EXPECT_EQ(file.tensors.at("multihead_attn.out_proj.weight").shape(), (Shape{8, 8}));
  nn::load_module(b, path);
  const NamedTensors sa = nn::state_dict(a), sb = nn::state_dict(b);
  for (const auto& [name, t] : sa) EXPECT_EQ(t.to_vector(), sb.at(name).to_vector()) << name;
  // A missing tensor: nothing is loaded.
  Generator g3(3);
  nn::TransformerDecoderLayer fresh(c, g3);
  const NamedTensors before = nn::state_dict(fresh);
  std::vector<std::vector<double>> saved;
  for (const auto& [name, t] : before) saved.push_back(t.to_vector());
  NamedTensors partial = file.tensors;
  partial.erase("norm3.bias");
  EXPECT_THROW(nn::load_state_dict(fresh, partial), Error);
  partial = file.tensors;
  partial["extra"] = Tensor::zeros({1});
  EXPECT_THROW(nn::load_state_dict(fresh, partial), Error);
  std::size_t n = 0;
  for (const auto& [name, t] : nn::state_dict(fresh)) EXPECT_EQ(t.to_vector(), saved[n++]) << name;
  nn::load_state_dict(fresh, partial, /*strict=*/false);  // extra names allowed when not strict
  partial = file.tensors;
  partial["linear1.weight"] = Tensor::zeros({3, 3});
  try {
    nn::load_state_dict(fresh, partial);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "linear1.weight: expected shape [16, 8], got [3, 3]");
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace qkv::testing
