#pragma once

// Cross entropy's row passes on the CPU's widest vectors (cross_entropy.cpp), for the autodiff
// engine's cross_entropy: softmax and the smoothed negative log-likelihood in one pass, every sum,
// exp and product in double. The scalar loops they replace (three exp/log calls an element, on one
// thread) were 4.9% of a training step of qkv demo's translator, which the second thread spent
// waiting (perf, 2 threads of the AMD EPYC Zen 5 VM, 2026-11-29).

#include <cstdint>

namespace qkv::kernels::cpu {

// x [rows, C] (logits), targets [rows] -> p [rows, C] = softmax of each row, and loss [rows]:
//   loss_n = -(1 - eps) log p[n, t_n] - (eps / C) sum_c log p[n, c]
// for a row whose target t_n is not `ignore` (the smoothing term only where eps > 0, so that a
// -inf logit outside the target costs nothing without smoothing, as PyTorch), else 0. A NaN
// anywhere in a row makes its p and loss NaN. Targets other than `ignore` lie in [0, C).
void cross_entropy_rows(const float* x, std::int64_t rows, std::int64_t C,
                        const std::int64_t* targets, std::int64_t ignore, double eps, double* p,
                        double* loss);
void cross_entropy_rows(const double* x, std::int64_t rows, std::int64_t C,
                        const std::int64_t* targets, std::int64_t ignore, double eps, double* p,
                        double* loss);

// The backward of the mean of loss_n over the counted rows, from p as cross_entropy_rows wrote it:
//   dx[n, c] = scale (p[n, c] - (1 - eps) [c == t_n] - eps / C)
// with scale = dloss / counted, and 0 in a row whose target is `ignore`.
void cross_entropy_backward_rows(const double* p, std::int64_t rows, std::int64_t C,
                                 const std::int64_t* targets, std::int64_t ignore, double eps,
                                 double scale, float* dx);
void cross_entropy_backward_rows(const double* p, std::int64_t rows, std::int64_t C,
                                 const std::int64_t* targets, std::int64_t ignore, double eps,
                                 double scale, double* dx);

}  // namespace qkv::kernels::cpu
