#pragma once

#include <cstdint>
#include <vector>

#include "qkv/autograd/var.hpp"
#include "qkv/tensor.hpp"

namespace qkv::nn {

using autograd::Var;

// Every optimizer updates its parameters' values in place from their gradients; a parameter
// whose gradient is undefined (no backward reached it) is skipped, as PyTorch skips grad None.
// State is kept in f64 whatever the parameter's dtype.

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// torch.optim.SGD: g = grad + wd p; with momentum, buf = g on the first step, then
// buf = momentum buf + (1 - dampening) g, and g = buf (or g + momentum buf with nesterov);
// p -= lr g.
class Sgd {
 public:
  // Throws qkv::Error for lr, momentum or weight_decay < 0 (or NaN), nesterov without momentum > 0
  // and dampening 0, and parameters that are not leaves requiring grad.
  Sgd(std::vector<Var> parameters, const SgdOptions& options);
  void step();
  void zero_grad();
  SgdOptions& options() noexcept { return options_; }

 private:
  std::vector<Var> parameters_;
  SgdOptions options_;
  std::vector<std::vector<double>> momentum_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// torch.optim.AdamW: p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps).
class AdamW {
 public:
  // Throws qkv::Error for lr, eps or weight_decay < 0, betas outside [0, 1) (NaN too), and
  // parameters that are not leaves requiring grad.
  AdamW(std::vector<Var> parameters, const AdamWOptions& options);
  void step();
  void zero_grad();
  AdamWOptions& options() noexcept { return options_; }
  std::int64_t steps() const noexcept { return steps_; }

 private:
  std::vector<Var> parameters_;
  AdamWOptions options_;
  std::int64_t steps_ = 0;
  // The moments in each parameter's dtype (f32 or f64), as torch.optim.AdamW keeps them.
  std::vector<std::vector<float>> m32_, v32_;
  std::vector<std::vector<double>> m64_, v64_;
};

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, PyTorch's
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;  // steps in a row without inf or NaN before growing
};

// Dynamic loss scaling for f16 training (torch.amp.GradScaler): the backward runs on
// loss * scale so that small gradients are not flushed to zero in f16, and overflows show up as
// inf or NaN. unscale divides every gradient by the scale and says whether all are finite; when
// one is not, the caller skips the optimizer's step and update multiplies the scale by
// backoff_factor; after growth_interval finite steps in a row it multiplies it by growth_factor.
class GradScaler {
 public:
  // Throws qkv::Error for init_scale <= 0, growth_factor <= 1, backoff_factor outside (0, 1) and
  // growth_interval < 1 (NaN too).
  explicit GradScaler(const GradScalerOptions& options = {});
  // loss [...] -> loss * scale
  Var scale(const Var& loss) const;
  // Each parameter's gradient [...] divided by the scale, in place. True when every element of
  // every gradient is finite.
  bool unscale(const std::vector<Var>& parameters) const;
  // After each step, taken or skipped: found_inf is !unscale(...).
  void update(bool found_inf);
  double scale() const noexcept { return scale_; }

 private:
  GradScalerOptions options_;
  double scale_;
  std::int64_t good_steps_ = 0;
};

// torch.nn.utils.clip_grad_norm_: the global L2 norm of every gradient; when above max_norm,
// every gradient is scaled by max_norm / (norm + 1e-6). Returns the norm before clipping.
// max_norm >= 0 (else qkv::Error, no gradient touched).
double clip_grad_norm(const std::vector<Var>& parameters, double max_norm);

// Linear warm-up from 0 to base_lr over warmup_steps, then cosine decay to min_lr at
// total_steps (and min_lr after): at step s (from 0),
//   s < warmup:  base_lr s / warmup
//   else:        min_lr + (base_lr - min_lr) (1 + cos(pi progress)) / 2,
//                progress = (s - warmup) / (total - warmup) clamped to 1
// (Hugging Face's get_cosine_schedule_with_warmup when min_lr = 0).
double warmup_cosine_lr(std::int64_t step, double base_lr, std::int64_t warmup_steps,
                        std::int64_t total_steps, double min_lr = 0.0);

}  // namespace qkv::nn
