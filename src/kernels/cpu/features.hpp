#pragma once

// Linear attention's feature maps on the CPU's widest vectors (features.cpp): phi(x) = elu(x) + 1
// and the product of a gradient with its derivative, and FAVOR+'s exp of shifted logits, with the
// fused kernels' exp (tile-inl.h, exp_softmax: 1.23 ulp in f32 over [-87, 0], where phi's exp is
// taken).

#include <cstdint>

namespace qkv::kernels::cpu {

// f [n] <- phi(x [n]): x + 1 for x > 0, exp(x) else (NaN stays NaN, -inf gives 0).
void elu_features(const float* x, std::int64_t n, float* f);
void elu_features(const double* x, std::int64_t n, double* f);
// out [n] <- g [n] * phi'(x [n]): g for x > 0, g exp(x) else.
void elu_feature_grads(const float* x, const float* g, std::int64_t n, float* out);
void elu_feature_grads(const double* x, const double* g, std::int64_t n, double* out);

// f [n] <- factor * exp(u [n] - shift), for u <= shift (larger u are taken as shift).
void exp_features(const float* u, std::int64_t n, float shift, float factor, float* f);
void exp_features(const double* u, std::int64_t n, double shift, double factor, double* f);

}  // namespace qkv::kernels::cpu
