#pragma once

// The feature-map options of linear attention (qkv/linear_attention.hpp) as linear_attention and
// LinearState share them: their checks, and FAVOR+'s features ready for the kernels.

#include <cstdint>
#include <vector>

#include "qkv/dtype.hpp"
#include "qkv/linear_attention.hpp"

namespace qkv::attention {

// Checks feature_map, num_features, scale and eps for inputs of this dtype (eps and scale finite
// where the kernels compute); throws qkv::Error naming the option.
void validate_feature_options(const LinearOptions& options, DType inputs);

// favor: s, the options' scale or 1 / sqrt(D).
double favor_scale(const LinearOptions& options, std::int64_t D);

// favor: the rows of favor_features(D, F, seed) times sqrt(s) [F, D], row-major, in f64.
std::vector<double> scaled_favor_features(const LinearOptions& options, std::int64_t D);

}  // namespace qkv::attention
