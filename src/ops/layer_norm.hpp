#pragma once

// The layer norm forward with what its backward needs (autograd's layer_norm keeps it).
#include "qkv/tensor.hpp"

namespace qkv::ops {

struct LayerNormSaved {
  Tensor out;   // x's shape: xhat * weight + bias
  Tensor xhat;  // x's shape: (x - mean) * rstd
  Tensor rstd;  // [rows] f64: 1 / sqrt(var + eps)
};

// x [..., *normalized_shape], weight and bias [*normalized_shape] or undefined -> as
// qkv::ops::layer_norm, with xhat and rstd.
LayerNormSaved layer_norm_saving(const Tensor& x, const Shape& normalized_shape,
                                 const Tensor& weight, const Tensor& bias, double eps);

}  // namespace qkv::ops
