#pragma once

// The optimizers' per-element updates on the CPU's widest vectors (optimizer_update.cpp), for
// nn::AdamW and nn::clip_grad_norm. The scalar loops they replace (double math one element at a
// time, the gradients copied to double vectors first) took 10.2 ms of AdamW and 2.7 ms of clipping
// per training step of qkv demo's translator (0.98M parameters; 66 ms a step, 2 threads of an
// Intel Xeon with AMX, 2026-11-27).

#include <cstdint>

namespace qkv::kernels::cpu {

// One AdamW step's constants (torch.optim.AdamW's rule, with the bias corrections folded in).
struct AdamWConstants {
  double decay = 1;                  // 1 - lr * weight_decay
  double beta1 = 0.9;                // m <- beta1 m + (1 - beta1) g
  double beta2 = 0.999;              // v <- beta2 v + (1 - beta2) g^2
  double step_size = 1e-3;           // lr / (1 - beta1^t)
  double bias_correction2_sqrt = 1;  // sqrt(1 - beta2^t)
  double eps = 1e-8;
};

// p [n], g [n], m [n], v [n] (the moments in the parameter's type, as torch.optim keeps them):
// for every element, in double,
//   p <- p decay; m <- beta1 m + (1 - beta1) g; v <- beta2 v + (1 - beta2) g g;
//   p <- p - step_size m / (sqrt(v) / bias_correction2_sqrt + eps),
// m, v and p each rounded once to their type. f32 moments halve the step's memory traffic, which
// bounds it: 2.4 ms with double moments for the translator's 0.98M parameters (2 threads).
void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n,
                  const AdamWConstants& c);
void adamw_update(double* p, const double* g, double* m, double* v, std::int64_t n,
                  const AdamWConstants& c);

// sum of g[i]^2 over x [n], accumulated in double.
double sum_of_squares(const float* x, std::int64_t n);
double sum_of_squares(const double* x, std::int64_t n);

// x [n] <- x * factor (computed in double, rounded once to the type).
void scale_values(float* x, std::int64_t n, double factor);
void scale_values(double* x, std::int64_t n, double factor);

}  // namespace qkv::kernels::cpu
