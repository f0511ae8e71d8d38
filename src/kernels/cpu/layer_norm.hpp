#pragma once

// Layer normalization's row passes on the CPU's widest vectors (layer_norm.cpp), for the autodiff
// engine's layer_norm: every sum and product in double, as the scalar loops they replace, which
// were 8% of a training step of qkv demo's translator (2 threads of an Intel Xeon with AMX,
// 2026-11-27, perf).

#include <cstdint>

namespace qkv::kernels::cpu {

// x [rows, n] -> per row: mean, var (both over n), rstd[row] = 1 / sqrt(var + eps),
// xhat = (x - mean) rstd, out = xhat w + b (w, b [n], or null for 1 and 0). xhat [rows, n] may be
// null: then it is not kept (a forward with no backward to follow).
void layer_norm_rows(const float* x, std::int64_t rows, std::int64_t n, const float* w,
                     const float* b, double eps, float* out, float* xhat, double* rstd);
void layer_norm_rows(const double* x, std::int64_t rows, std::int64_t n, const double* w,
                     const double* b, double eps, double* out, double* xhat, double* rstd);

// The backward of out = xhat w + b, xhat = (x - mean) rstd, from g = dL/dout [rows, n]:
// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) with dxhat = g w, and dw_sum[j] +=
// sum over rows of g xhat, db_sum[j] += sum over rows of g (both [n], in double).
void layer_norm_backward_rows(const float* g, const float* xhat, const float* w, const double* rstd,
                              std::int64_t rows, std::int64_t n, float* dx, double* dw_sum,
                              double* db_sum);
void layer_norm_backward_rows(const double* g, const double* xhat, const double* w,
                              const double* rstd, std::int64_t rows, std::int64_t n, double* dx,
                              double* dw_sum, double* db_sum);

}  // namespace qkv::kernels::cpu
